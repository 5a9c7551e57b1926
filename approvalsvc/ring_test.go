package approvalsvc

import (
	"slices"
	"testing"
)

func TestRingKeepsTheNewestNewestFirst(t *testing.T) {
	r := newRing[int](3)
	if got := r.appendNewestFirst([]int{}); len(got) != 0 || got == nil {
		t.Fatalf("empty ring: %v (want a non-nil empty slice)", got)
	}
	for i, want := range [][]int{{1}, {2, 1}, {3, 2, 1}, {4, 3, 2}, {5, 4, 3}, {6, 5, 4}, {7, 6, 5}} {
		r.push(i + 1)
		if got := r.appendNewestFirst(nil); !slices.Equal(got, want) || r.len() != len(want) {
			t.Fatalf("after %d pushes: %v (len %d), want %v", i+1, got, r.len(), want)
		}
	}
}
