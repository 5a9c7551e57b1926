package approvalsvc

import (
	"encoding/json"
	"sync"
)

// Event names published by the service (SPEC §7.3 SSE names).
const (
	EventApprovalCreated = "approval_created"
	EventApprovalDecided = "approval_decided"
	EventBlocked         = "blocked"
)

// Event is one published event: a name and a JSON object.
type Event struct {
	Name string
	Data json.RawMessage
}

// bus fans events out to subscribers without ever blocking the publisher: a
// subscriber that falls behind loses events (its channel is full).
type bus struct {
	mu   sync.Mutex
	next int
	subs map[int]chan Event
}

func newBus() *bus { return &bus{subs: map[int]chan Event{}} }

func (b *bus) publish(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	ev := Event{Name: name, Data: data}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ch := range b.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// Subscribe returns a channel of approval_created, approval_decided and
// blocked events (buffer events deep; 256 when buffer ≤ 0) and a cancel
// function that closes it.
func (s *Service) Subscribe(buffer int) (<-chan Event, func()) {
	if buffer <= 0 {
		buffer = 256
	}
	b := s.bus
	ch := make(chan Event, buffer)
	b.mu.Lock()
	id := b.next
	b.next++
	b.subs[id] = ch
	b.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, id)
			b.mu.Unlock()
			close(ch)
		})
	}
}
