package main

import (
	"context"

	"github.com/netproxy/netproxy/internal/server"
	"github.com/netproxy/netproxy/internal/webui"
)

// The web UI plugs into `netproxy serve` through serveSetup. It must run
// after the approval service's step (which installs the decider): Go runs
// init functions in file-name order, and this file sorts after
// approvals_*.go and serve_approvals.go.
func init() { serveSetup = append(serveSetup, setupWebUI) }

// setupWebUI mounts the approvals page, its login and /api/events,
// /api/executions on the admin listener, and feeds the event hub from the
// execution registry and the approval service.
func setupWebUI(s *server.Server) error {
	log := s.Logger()
	hub := webui.NewHub(webui.HubOptions{Logger: log})
	ui := webui.New(webui.Options{
		Auth:       webui.NewAuth(s.AdminToken(), 0, nil),
		Hub:        hub,
		Executions: webui.WatchRegistry(s.Registry(), hub),
		Logger:     log,
	})
	ui.Mount(s.Admin())
	if src, ok := s.Decider().(webui.ApprovalEvents); ok {
		// Lives as long as the process: the service outlives every stream.
		webui.RelayApprovals(context.Background(), src, hub)
	} else if s.Config().Approvals.Enabled {
		log.Warn("web UI: no approval service to take events from; the approvals page will not update live")
	}
	return nil
}
