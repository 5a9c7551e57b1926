package main

import (
	"fmt"
	"io"

	"github.com/netproxy/netproxy/metrics/audit"
)

const auditUsage = "usage: netproxy audit verify FILE...   (oldest first: rotated files, then the current one; gzip accepted)"

// runAudit is `netproxy audit verify FILE...` (SPEC §7.5): exit 0 when the
// hash chain holds across the files, 1 naming the first line (file:line and
// seq) at which it breaks, 2 for usage and I/O errors.
func runAudit(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, auditUsage)
		return exitUsage
	}
	res, err := audit.Verify(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "netproxy audit verify: %v\n", err)
		return exitUsage
	}
	if b := res.Break; b != nil {
		where := fmt.Sprintf("%s:%d", b.File, b.Line)
		if b.Line < 0 {
			where = b.File + ": last line"
		}
		fmt.Fprintf(stdout, "BROKEN at %s (seq %d): %s\n", where, b.Seq, b.Why)
		fmt.Fprintf(stdout, "%d line(s) verified before it (seq %d..%d)\n", res.Lines, res.FirstSeq, res.LastSeq)
		return 1
	}
	if res.Lines == 0 {
		fmt.Fprintf(stderr, "netproxy audit verify: no chained line in %d file(s) (%d line(s) written before the chain existed)\n", len(args)-1, res.Legacy)
		return exitUsage
	}
	fmt.Fprintf(stdout, "OK: %d line(s), seq %d..%d", res.Lines, res.FirstSeq, res.LastSeq)
	if res.Legacy > 0 {
		fmt.Fprintf(stdout, " (%d earlier line(s) without a chain)", res.Legacy)
	}
	fmt.Fprintln(stdout)
	return 0
}
