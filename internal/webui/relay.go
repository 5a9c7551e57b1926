package webui

import (
	"context"

	"github.com/netproxy/netproxy/approvalsvc"
)

// ApprovalEvents is the approval service's subscribe API
// (*approvalsvc.Service implements it): approval_created,
// approval_decided and blocked events with JSON data.
type ApprovalEvents interface {
	Subscribe(buffer int) (<-chan approvalsvc.Event, func())
}

// RelayApprovals forwards src's events to hub until ctx ends or src closes
// the channel. It subscribes before returning, so no event published after
// the call is missed; the forwarding runs in its own goroutine.
func RelayApprovals(ctx context.Context, src ApprovalEvents, hub *Hub) {
	events, cancel := src.Subscribe(1024)
	go func() {
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				hub.Publish(ev.Name, ev.Data)
			}
		}
	}()
}
