package mitm

import "time"

// Exchange is the end of one inner request that was forwarded upstream
// (refused ones are not reported): what an access record needs (SPEC §7.5
// connection_end). It never carries a header value, a path or a query.
type Exchange struct {
	Method  string
	Started time.Time // when the inner request's head had been read
	// Status is the upstream's status; 0 when no answer came (Failed).
	Status int
	// Up and Down are the body bytes relayed (as Tunnel.Bytes counts them).
	Up, Down int64
	// Failed: the upstream could not be reached or its answer broke off;
	// Err: relaying the answer to the client failed.
	Failed bool
	Err    error
}

// ended reports an exchange to t.Ended, when set.
func (t *Tunnel) ended(x Exchange) {
	if t.Ended != nil {
		t.Ended(x)
	}
}

// countBytes wraps t.Bytes so that an upgraded exchange's bytes are known
// to its Exchange too (spliceUpgrade reports each direction once, in turn).
func (t *Tunnel) countBytes(x *Exchange) func(string, int64) {
	return func(dir string, n int64) {
		if t.Bytes != nil {
			t.Bytes(dir, n)
		}
		if dir == "up" {
			x.Up += n
		} else {
			x.Down += n
		}
	}
}
