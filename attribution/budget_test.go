package attribution

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "100MiB": 100 << 20, "1GB": 1e9, "1 gib": 1 << 30,
		"1.5KiB": 1536, "2kb": 2000, "10B": 10, " 3MB ": 3e6,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "lots", "-1", "-1MiB", "1XB", "1e400GiB", "9223372036854775807KiB", "NaN"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestBudgetNarrow(t *testing.T) {
	host := BudgetLimits{BytesIn: 100, Requests: 10}
	got, notes := BudgetLimits{BytesIn: 200, Requests: 5, Hosts: 3}.Narrow(host)
	if got != (BudgetLimits{BytesIn: 100, Requests: 5, Hosts: 3}) || len(notes) != 1 || !strings.Contains(notes[0], "budgets.bytes_in") {
		t.Fatalf("%+v %v", got, notes)
	}
	if got, _ := (BudgetLimits{}).Narrow(host); got != host {
		t.Fatalf("unset own limits take the host's: %+v", got)
	}
}

func TestBudgetAdmit(t *testing.T) {
	if NewBudget(BudgetLimits{}) != nil {
		t.Fatal("no limit must mean no budget (nil: the data path's whole cost)")
	}
	var nilB *Budget
	if nilB.Admit("x") != "" || nilB.AddIn(1) || nilB.AddOut(1) {
		t.Fatal("a nil budget limits nothing")
	}
	b := NewBudget(BudgetLimits{Requests: 3, Hosts: 2, BytesIn: 10})
	for i, c := range []struct{ host, want string }{
		{"a", ""}, {"b", ""}, {"c", LimitHosts}, {"a", ""}, {"b", LimitRequests},
	} {
		if got := b.Admit(c.host); got != c.want {
			t.Fatalf("%d %s: %q want %q", i, c.host, got, c.want)
		}
	}
	if b.AddIn(10) || !b.AddIn(1) {
		t.Fatal("bytes_in is exceeded past, not at, the limit")
	}
	if got := b.Admit("a"); got != LimitBytesIn {
		t.Fatalf("after bytes_in: %q", got)
	}
	if u := b.Usage(); u != (Usage{BytesIn: 11, Requests: 3, Hosts: 2}) {
		t.Fatalf("usage %+v", u)
	}
}

// TestBudgetConcurrentHosts: concurrent new hosts never pass the limit.
func TestBudgetConcurrentHosts(t *testing.T) {
	b := NewBudget(BudgetLimits{Hosts: 5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := map[string]bool{}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := string(rune('a' + i%20))
			if b.Admit(h) == "" {
				mu.Lock()
				admitted[h] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(admitted) > 5 || b.Usage().Hosts != int64(len(admitted)) {
		t.Fatalf("%d hosts admitted, usage %+v", len(admitted), b.Usage())
	}
}

// TestControlBudgets: POST narrows and notes the clamp, a bad value is a
// 400, GET reports the usage, events carry it; unbudgeted: no usage.
func TestControlBudgets(t *testing.T) {
	reg := NewRegistry()
	reg.SetBudgetLimits(BudgetLimits{Requests: 5})
	h := NewControlServer(reg, ProxyInfo{}, nil).Handler()
	post := func(body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/executions", strings.NewReader(body)))
		return w
	}
	for _, bad := range []string{`{"requests":-1}`, `{"bytes_in":"lots"}`, `{"bytes_out":true}`, `{"bogus":1}`} {
		if w := post(`{"session_id":"s","environment_id":"e","budgets":` + bad + `}`); w.Code != http.StatusBadRequest {
			t.Errorf("budgets %s: %d %s", bad, w.Code, w.Body)
		}
	}
	w := post(`{"session_id":"s","environment_id":"e","budgets":{"requests":9,"bytes_in":"1KiB"}}`)
	var r struct {
		ID    string   `json:"execution_id"`
		Notes []string `json:"budget_notes"`
	}
	if w.Code != 201 || json.Unmarshal(w.Body.Bytes(), &r) != nil || len(r.Notes) != 1 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	e, _ := reg.Get(r.ID)
	if *e.Budgets != (BudgetLimits{Requests: 5, BytesIn: 1024}) {
		t.Fatalf("effective %+v", *e.Budgets)
	}
	e.Budget.Admit("x")
	e.Budget.AddIn(7)
	ch, cancel, _ := reg.Subscribe(r.ID)
	defer cancel()
	reg.Publish(r.ID, Event{Type: EventNetworkDecision})
	if ev := <-ch; ev.Usage == nil || *ev.Usage != (Usage{Requests: 1, Hosts: 1, BytesIn: 7}) {
		t.Fatalf("event usage %+v", ev.Usage)
	}
	gw := httptest.NewRecorder()
	h.ServeHTTP(gw, httptest.NewRequest("GET", "/v1/executions/"+r.ID, nil))
	if !strings.Contains(gw.Body.String(), `"usage":{"bytes_out":0,"bytes_in":7,"requests":1,"hosts":1}`) {
		t.Fatalf("GET %s", gw.Body)
	}
	// No host-wide budget and none asked: no budget, no usage.
	reg.SetBudgetLimits(BudgetLimits{})
	w = post(`{"session_id":"s","environment_id":"e"}`)
	json.Unmarshal(w.Body.Bytes(), &r)
	if e, _ := reg.Get(r.ID); e.Budget != nil || e.Budgets != nil {
		t.Fatal("an unbudgeted execution got a budget")
	}
	gw = httptest.NewRecorder()
	h.ServeHTTP(gw, httptest.NewRequest("GET", "/v1/executions/"+r.ID, nil))
	if strings.Contains(gw.Body.String(), "usage") {
		t.Fatalf("GET %s", gw.Body)
	}
	// An adopted execution (cluster) counts its own usage here.
	reg.SetBudgetLimits(BudgetLimits{Hosts: 1})
	if !reg.Adopt(Execution{ID: "exec_remote", SessionID: "s", EnvironmentID: "e", Budgets: &BudgetLimits{Requests: 3}}, [32]byte{1}) {
		t.Fatal("adopt")
	}
	if e, _ := reg.Get("exec_remote"); e.Budget == nil || *e.Budgets != (BudgetLimits{Requests: 3, Hosts: 1}) {
		t.Fatalf("adopted %+v", e.Budgets)
	}
}

// BenchmarkBudgetPerRequest is what a budget adds to one keep-alive
// request on the data path: admitting it (a host seen before) and
// counting one body each way. Lock-free, allocation-free.
func BenchmarkBudgetPerRequest(b *testing.B) {
	bg := NewBudget(BudgetLimits{BytesOut: 1 << 50, BytesIn: 1 << 50, Requests: 1 << 50, Hosts: 100})
	bg.Admit("up.test")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if bg.Admit("up.test") != "" {
				b.Fatal("refused")
			}
			bg.Remaining(true)
			bg.AddOut(100)
			bg.Remaining(false)
			bg.AddIn(5)
		}
	})
}
