package cluster

// The pending bounds across replicas (SPEC §5, §7.7): approvals.max_pending
// and max_pending_per_session count the reviews open in the whole cluster.
// beginScript holds the slots; the decision frees them, and a slot of a
// replica that died frees itself at its review's lease end (its deadline,
// approvals.timeout, plus 5 s). With Redis down no review opens at all
// (approvals_unavailable): the cluster cannot be counted, so nothing is
// let past the bound.

import (
	"fmt"
	"strings"
)

// pendingBounder is what the attached approval service says of the bounds
// (*approvalsvc.Service implements it); without it nothing is bounded here
// (the service still bounds its own reviews).
type pendingBounder interface {
	PendingBounds() (total, perSession int)
}

func (c *Cluster) pendingBounds() (total, perSession int) {
	if b, ok := c.reviewSink().(pendingBounder); ok {
		return b.PendingBounds()
	}
	return 0, 0
}

// overloadWhy explains a "full" answer of beginScript ("total|N" or
// "session|N") as the service's own bound check does.
func overloadWhy(v string) string {
	which, n, _ := strings.Cut(v, "|")
	if which == "session" {
		return fmt.Sprintf("%s reviews are pending in this session across the cluster (approvals.max_pending_per_session); try again once the reviewer has decided some", n)
	}
	return fmt.Sprintf("%s reviews are pending across the cluster (approvals.max_pending); try again once the reviewer has decided some", n)
}
