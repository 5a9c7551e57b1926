package attribution

import "net/http"

// Placeholder is one credential placeholder handed to an execution at
// registration: the sandbox holds Value (in variable Env) instead of the
// secret, which netproxy injects toward the credential's hosts only
// (docs/credentials.md).
type Placeholder struct {
	Credential string `json:"credential"`
	Env        string `json:"env,omitempty"`
	Value      string `json:"value"`
}

// Credentials is what registration adds for the credential broker: the
// execution's placeholders and the interception CA's certificate (PEM,
// public) that the sandbox must trust.
type Credentials struct {
	Placeholders []Placeholder `json:"placeholders,omitempty"`
	CACert       string        `json:"ca_cert,omitempty"`
}

// Minter mints an execution's credentials at registration; an error fails
// the registration (the execution is revoked again).
type Minter func(executionID string) (Credentials, error)

// SetMinter installs the credential broker's minter (nil: none).
func (c *ControlServer) SetMinter(m Minter) {
	c.mu.Lock()
	c.minter = m
	c.mu.Unlock()
}

// mintCredentials mints a registered execution's credentials. On failure
// it revokes the execution, answers 500 and reports false.
func (c *ControlServer) mintCredentials(w http.ResponseWriter, id string) (Credentials, bool) {
	c.mu.RLock()
	mint := c.minter
	c.mu.RUnlock()
	if mint == nil {
		return Credentials{}, true
	}
	creds, err := mint(id)
	if err != nil {
		c.reg.Revoke(id)
		writeError(w, http.StatusInternalServerError, "minting credential placeholders failed: "+err.Error())
		return Credentials{}, false
	}
	return creds, true
}
