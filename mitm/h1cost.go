package mitm

import (
	"bufio"
	"fmt"
	"net/http"
)

// The per-request costs of an intercepted HTTP/1.1 keep-alive exchange
// (issue 29) are kept off the heap where the standard library allows:
// these helpers are values the compiler can keep on the tunnel
// goroutine's stack.

// interim relays the upstream's 1xx answers (103 Early Hints; 100
// Continue to a client that asked) to the client as they arrive, as
// ReverseProxy's Got1xxResponse does. It runs while the tunnel's
// goroutine waits for the final answer: bw has one writer at a time.
type interim struct {
	bw           *bufio.Writer
	wantContinue bool
}

func (r *interim) relay(code int, hh http.Header) error {
	if code == http.StatusContinue && !r.wantContinue {
		return nil
	}
	removeHopByHop(hh)
	fmt.Fprintf(r.bw, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	hh.Write(r.bw)
	r.bw.WriteString("\r\n")
	return r.bw.Flush()
}

// writeOnly exposes a bufio.Writer's Write and WriteString but not its
// ReadFrom, which would lend its buffer to a body's Read that flushes the
// same buffer (flushBeforeRead). WriteString spares net/http a []byte
// copy of every header line; one pointer field boxes without allocating.
type writeOnly struct{ w *bufio.Writer }

func (o writeOnly) Write(p []byte) (int, error)       { return o.w.Write(p) }
func (o writeOnly) WriteString(s string) (int, error) { return o.w.WriteString(s) }
