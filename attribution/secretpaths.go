package attribution

// SecretPathsPath is the control API route that lists the paths holding
// netproxy's secrets, so that execwrap hides them from its sandbox (SPEC
// §6.5): GET answers 200 with a SecretPaths body.
const SecretPathsPath = "/v1/secret-paths"

// SecretPaths is the body of GET /v1/secret-paths. Paths are absolute; a
// folder stands for everything in it.
type SecretPaths struct {
	Paths []string `json:"paths"`
}
