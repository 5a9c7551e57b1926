package netctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"

	"github.com/netproxy/netproxy/attribution"
)

// ErrUnreachable says nothing listens on the control socket (no such
// file, connection refused): netproxy is not running there.
var ErrUnreachable = errors.New("netproxy control socket unreachable")

// SecretPaths asks netproxy which paths hold its secrets. When nothing
// listens on the socket the error wraps ErrUnreachable; any other failure
// (an answer that is not a list of absolute paths, a non-200 status) is
// an error the caller must not run past: it cannot know what to hide.
func (c *Client) SecretPaths(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://netproxy"+attribution.SecretPathsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("%w: %s (%v)", ErrUnreachable, c.socket, op.Err)
		}
		return nil, c.wrap(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w; netproxy must answer GET %s to run sandboxed (upgrade netproxy, or stop it)", c.statusErr("GET "+attribution.SecretPathsPath, resp), attribution.SecretPathsPath)
	}
	var a struct {
		Paths *[]string `json:"paths"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return nil, fmt.Errorf("netproxy control %s: GET %s: bad JSON answer: %w", c.socket, attribution.SecretPathsPath, err)
	}
	if a.Paths == nil {
		return nil, fmt.Errorf("netproxy control %s: GET %s: the answer has no \"paths\" list", c.socket, attribution.SecretPathsPath)
	}
	for _, p := range *a.Paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("netproxy control %s: GET %s: path %q is not absolute", c.socket, attribution.SecretPathsPath, p)
		}
	}
	return *a.Paths, nil
}
