package server

import (
	"context"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/internal/webui"
)

// setupWebUI mounts the approvals page, its login and /api/events,
// /api/executions on the admin listener, and feeds the event hub from the
// execution registry and the approval service.
func (s *Server) setupWebUI(approvals *approvalsvc.Service) {
	log := s.Logger()
	hub := webui.NewHub(webui.HubOptions{Logger: log})
	ui := webui.New(webui.Options{
		Auth:       webui.NewAuth(s.AdminToken(), 0, nil),
		Hub:        hub,
		Executions: webui.WatchRegistry(s.Registry(), hub),
		Logger:     log,
	})
	ui.Mount(s.Admin())
	// Lives as long as the process: the service outlives every stream.
	webui.RelayApprovals(context.Background(), approvals, hub)
}
