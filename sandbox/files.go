package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is a file the sandbox creates in its own private temporary folder
// before the command starts (the CA bundle of docs/credentials.md): the
// namespaces tier writes it inside its private /tmp, the landlock tier in
// its private TMPDIR, an unsandboxed run in a private folder removed after
// the command. Nothing is written anywhere else. Each variable in Env is
// set to the file's path.
type File struct {
	Name string `json:"name"` // a base name
	// PrependFirst lists files whose content goes before Data: the first
	// readable one, read where the file is written (inside the sandbox for
	// the namespaces tier), e.g. the system's root certificates.
	PrependFirst []string `json:"prepend_first,omitempty"`
	Data         []byte   `json:"data"`
	Env          []string `json:"env,omitempty"`
}

func checkFiles(files []File) error {
	for _, f := range files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) || strings.HasPrefix(f.Name, ".") {
			return fmt.Errorf("sandbox: file name %q must be a plain base name", f.Name)
		}
	}
	return nil
}

// writeFiles creates each file in dir (read-only; never over an existing
// file).
func writeFiles(dir string, files []File) error {
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return fmt.Errorf("sandbox: creating %s: %w", p, err)
		}
		var werr error
		for _, src := range f.PrependFirst {
			if b, err := os.ReadFile(src); err == nil && len(b) > 0 {
				if b[len(b)-1] != '\n' {
					b = append(b, '\n')
				}
				_, werr = fd.Write(b)
				break
			}
		}
		if werr == nil {
			_, werr = fd.Write(f.Data)
		}
		if err := errors.Join(werr, fd.Close()); err != nil {
			return fmt.Errorf("sandbox: writing %s: %w", p, err)
		}
	}
	return nil
}

// fileEnv sets each file's variables to its path under dir.
func fileEnv(env []string, dir string, files []File) []string {
	for _, f := range files {
		for _, k := range f.Env {
			env = SetEnv(env, k, filepath.Join(dir, f.Name))
		}
	}
	return env
}

// privateFiles writes files into a fresh private folder (an unsandboxed
// run has no private /tmp) and returns env pointing at them and the
// folder's removal.
func privateFiles(env []string, files []File) ([]string, func(), error) {
	if len(files) == 0 {
		return env, func() {}, nil
	}
	if err := checkFiles(files); err != nil {
		return env, func() {}, err
	}
	dir, err := os.MkdirTemp("", "execwrap-files-")
	if err != nil {
		return env, func() {}, fmt.Errorf("sandbox: private folder for files: %w", err)
	}
	remove := func() { os.RemoveAll(dir) }
	if err := writeFiles(dir, files); err != nil {
		remove()
		return env, func() {}, err
	}
	return fileEnv(env, dir, files), remove, nil
}
