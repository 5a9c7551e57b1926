package selftest

import (
	"testing"

	"github.com/netproxy/netproxy/sandbox/capture"
	"golang.org/x/net/dns/dnsmessage"
)

// TestPoolAnswer: dns.resolver accepts only the capture resolver's own pool
// answers; a real address (the query left the sandbox) is still an escape.
func TestPoolAnswer(t *testing.T) {
	q, err := dnsQuery("x.exfil-probe.invalid")
	if err != nil {
		t.Fatal(err)
	}
	own := (&capture.Resolver{Pool: capture.NewDefaultPool()}).Answer(q)
	if !poolAnswer(own) {
		t.Fatal("the capture resolver's own answer is not recognised")
	}
	real := func(a [4]byte) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{Response: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("x.exfil-probe.invalid."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		b.StartAnswers()
		b.AResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("x.exfil-probe.invalid."), Class: dnsmessage.ClassINET}, dnsmessage.AResource{A: a})
		m, _ := b.Finish()
		return m
	}
	for _, a := range [][4]byte{{93, 184, 216, 34}, {198, 20, 0, 1}, {10, 0, 0, 1}} {
		if poolAnswer(real(a)) {
			t.Errorf("answer %v accepted as the sandbox's own", a)
		}
	}
	if !poolAnswer(real([4]byte{198, 18, 0, 7})) {
		t.Error("a pool address not accepted")
	}
	if poolAnswer([]byte{1, 2, 3}) {
		t.Error("garbage accepted")
	}
}
