package webui

import "github.com/netproxy/netproxy/attribution"

// FromAttribution converts a registry execution to the page's shape.
func FromAttribution(e attribution.Execution) Execution {
	return Execution{
		ID: e.ID, SessionID: e.SessionID, EnvironmentID: e.EnvironmentID, TurnID: e.TurnID,
		Command: e.Command, Cwd: e.Cwd, Started: e.Started,
	}
}

// WatchRegistry publishes execution_started / execution_ended for every
// change of reg on hub, and returns a lister of reg's active executions
// for Options.Executions.
func WatchRegistry(reg *attribution.Registry, hub *Hub) ExecutionLister {
	reg.OnChange(func(kind string, e attribution.Execution) {
		switch kind {
		case attribution.ExecutionStarted:
			hub.Publish(EventExecutionStarted, FromAttribution(e))
		case attribution.ExecutionEnded:
			hub.Publish(EventExecutionEnded, FromAttribution(e))
		}
	})
	return ExecutionListerFunc(func() []Execution {
		active := reg.Active()
		out := make([]Execution, 0, len(active))
		for _, e := range active {
			out = append(out, FromAttribution(e))
		}
		return out
	})
}
