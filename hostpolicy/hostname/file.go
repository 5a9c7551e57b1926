package hostname

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MaxFileErrors bounds the errors reported for one pattern file, so a wrong
// file (a binary, a CSV) gives a readable answer.
const MaxFileErrors = 20

// ReadPatternFile reads a domain file — one pattern per line, '#' comments
// (whole-line or trailing), blank lines and a UTF-8 byte-order mark ignored,
// CRLF accepted — and calls fn with each pattern and its 1-based line. It
// returns every error, each naming path:line; an unreadable file is one error
// naming the file.
func ReadPatternFile(path string, fn func(line int, pattern string) error) []error {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return []error{fmt.Errorf("domain file %s: cannot read: %v", path, err)}
	}
	defer f.Close()
	var errs []error
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff")
		}
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		if err := fn(line, text); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, line, err))
			if len(errs) >= MaxFileErrors {
				return append(errs, fmt.Errorf("%s: too many errors, stopping", path))
			}
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s:%d: %v", path, line+1, err))
	}
	return errs
}
