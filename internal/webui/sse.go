package webui

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxSSELine bounds one line of an event stream; a longer line is an error
// rather than an unbounded allocation.
const MaxSSELine = 1 << 20

// ErrSSELineTooLong is returned when a stream line exceeds MaxSSELine.
var ErrSSELineTooLong = errors.New("event stream line longer than 1 MiB")

// SSEReader parses a text/event-stream (the WHATWG format): "event:" names
// the event, "data:" lines are joined with "\n", comments and unknown fields
// are ignored, and a blank line dispatches. Events without data are skipped,
// as browsers do.
type SSEReader struct {
	sc *bufio.Scanner
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxSSELine)
	sc.Split(scanSSELines)
	return &SSEReader{sc: sc}
}

// Next returns the next event, io.EOF at the end of the stream, or an error.
func (s *SSEReader) Next() (Event, error) {
	var name string
	var data bytes.Buffer
	hasData := false
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			if hasData {
				if name == "" {
					name = "message"
				}
				return Event{Name: name, Data: append([]byte(nil), data.Bytes()...)}, nil
			}
			name = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > MaxSSELine {
				return Event{}, ErrSSELineTooLong
			}
			data.Write(value)
			hasData = true
		}
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, ErrSSELineTooLong
		}
		return Event{}, fmt.Errorf("reading event stream: %w", err)
	}
	return Event{}, io.EOF
}

// scanSSELines splits on "\r\n", "\n" or a lone "\r", as the SSE format
// requires.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	for i, b := range data {
		switch b {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			// Need one more byte to know whether "\r\n" follows.
			return 0, nil, nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
