package netctl

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// Nothing listening is ErrUnreachable (execwrap then hides what it knows);
// a control API without the route is an error of its own (fail closed).
func TestSecretPathsUnreachableVersusMissingRoute(t *testing.T) {
	ctx := context.Background()
	_, err := New(filepath.Join(t.TempDir(), "none.sock")).SecretPaths(ctx)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("no socket: %v, want ErrUnreachable", err)
	}
	_, c := startControl(t, nil) // the bare control API: no secret-paths route
	_, err = c.SecretPaths(ctx)
	if err == nil || errors.Is(err, ErrUnreachable) || !contains(err.Error(), "404") {
		t.Fatalf("missing route: %v, want a 404 error that is not ErrUnreachable", err)
	}
}
