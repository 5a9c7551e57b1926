package approvalsvc

// ring keeps the last len(items) values pushed. It has no lock of its own:
// its owner holds one around every call.
type ring[T any] struct {
	items []T
	next  int  // where the next push goes
	full  bool // every slot has been written at least once
}

func newRing[T any](capacity int) ring[T] { return ring[T]{items: make([]T, capacity)} }

func (r *ring[T]) push(v T) {
	r.items[r.next] = v
	r.next = (r.next + 1) % len(r.items)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring[T]) len() int {
	if r.full {
		return len(r.items)
	}
	return r.next
}

// appendNewestFirst appends the kept values to dst, newest first.
func (r *ring[T]) appendNewestFirst(dst []T) []T {
	for i := 1; i <= r.len(); i++ {
		dst = append(dst, r.items[(r.next-i+len(r.items))%len(r.items)])
	}
	return dst
}
