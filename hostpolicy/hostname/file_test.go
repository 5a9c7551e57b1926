package hostname

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPatternFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "list.txt")
	body := "\ufeffFirst.Test\r\n# comment\r\n\r\n  second.test  # trailing\n*.third.test\nbad pattern\n" + strings.Repeat("x", 2<<20) + "\n"
	os.WriteFile(p, []byte(body), 0o644)
	var got []string
	errs := ReadPatternFile(p, func(line int, pattern string) error {
		if _, err := ParsePattern(pattern); err != nil {
			return err
		}
		got = append(got, pattern)
		return nil
	})
	if strings.Join(got, ",") != "First.Test,second.test,*.third.test" {
		t.Errorf("patterns %q", got)
	}
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), p+":6: ") || !strings.Contains(errs[1].Error(), p+":7") {
		t.Errorf("errors %v", errs)
	}

	many := filepath.Join(dir, "many.txt")
	os.WriteFile(many, []byte(strings.Repeat("[\n", 100)), 0o644)
	errs = ReadPatternFile(many, func(int, string) error { return errors.New("bad") })
	if len(errs) != MaxFileErrors+1 {
		t.Errorf("want %d errors, got %d", MaxFileErrors+1, len(errs))
	}

	errs = ReadPatternFile(filepath.Join(dir, "absent.txt"), func(int, string) error { return nil })
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "absent.txt") {
		t.Errorf("unreadable file: %v", errs)
	}
}
