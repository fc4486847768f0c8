package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// The read side of the HTTP API: what the CLI's trace, usage, dlq and memory commands show, for
// the console and any other client. Every list is bounded by a window (since) and a limit the
// caller can raise up to a fixed maximum.
const (
	defaultSince      = 7 * 24 * time.Hour
	defaultListLimit  = 200
	maxListLimit      = 2000
	memoryCallTimeout = 15 * time.Second
	taskPreviewBytes  = 240
)

// listParams reads since and limit, answering a bad one itself.
func listParams(w http.ResponseWriter, r *http.Request) (from time.Time, limit int, ok bool) {
	since, ok := qSince.read(w, r)
	if !ok {
		return from, 0, false
	}
	if limit, ok = qListLimit.read(w, r); !ok {
		return from, 0, false
	}
	return time.Now().Add(-since), limit, true
}

// SessionRow is one element of GET /v1/sessions.
type SessionRow struct {
	SessionID string                 `json:"session_id"`
	Agent     string                 `json:"agent"`
	Task      string                 `json:"task"` // the first taskPreviewBytes bytes
	Status    protocol.SessionStatus `json:"status"`
	Outcome   protocol.Outcome       `json:"outcome,omitempty"`
	Reason    string                 `json:"reason,omitempty"`
	Parent    string                 `json:"parent,omitempty"`
	Root      string                 `json:"root,omitempty"`
	Children  int                    `json:"children"`
	Created   time.Time              `json:"created"`
	Updated   time.Time              `json:"updated"`
	// Usage is the session's last usage report (null while it runs).
	Usage *protocol.UsageReport `json:"usage"`
}

// httpSessions lists sessions updated within since, newest first, filtered by agent, status
// and a case-insensitive substring q of the id or task.
func (g *Gateway) httpSessions(w http.ResponseWriter, r *http.Request) {
	from, limit, ok := listParams(w, r)
	if !ok {
		return
	}
	agent, ok := qAgent.read(w, r)
	if !ok {
		return
	}
	text, ok := qText.read(w, r)
	if !ok {
		return
	}
	status, ok := qStatus.read(w, r)
	if !ok {
		return
	}
	text = strings.ToLower(text)
	ctx := r.Context()
	var rows []SessionRow
	truncated := false
	// Only the newest limit rows are answered: the list is cut back to them whenever it reaches
	// twice that, so a request holds O(limit) rows however many sessions the bucket keeps.
	keepNewest := func() {
		sort.Slice(rows, func(i, j int) bool { return rows[i].Created.After(rows[j].Created) })
		if len(rows) > limit {
			rows, truncated = rows[:limit], true
		}
	}
	err := g.sessions.Each(ctx, func(s protocol.Session) bool {
		if s.Updated.Before(from) {
			return true
		}
		if (agent != "" && s.Agent != agent) || (status != "" && string(s.Status) != status && string(s.Outcome) != status) {
			return true
		}
		if text != "" && !strings.Contains(strings.ToLower(s.SessionID+" "+s.Task), text) {
			return true
		}
		rows = append(rows, SessionRow{SessionID: s.SessionID, Agent: s.Agent, Task: preview(s.Task), Status: s.Status, Outcome: s.Outcome,
			Reason: s.Reason, Parent: s.Parent, Root: s.Root, Children: len(s.Children), Created: s.Created, Updated: s.Updated})
		if len(rows) >= 2*limit {
			keepNewest()
		}
		return true
	})
	if err != nil {
		httpRefuse(w, fmt.Errorf("sessions bucket: %w", err))
		return
	}
	keepNewest()
	if len(rows) > 0 {
		oldest := rows[len(rows)-1].Created
		reports, err := g.usageReports(ctx, oldest)
		if err != nil {
			httpRefuse(w, err)
			return
		}
		for i := range rows {
			if u, ok := reports[rows[i].SessionID]; ok {
				rows[i].Usage = &u.Report
			}
		}
	}
	if rows == nil {
		rows = []SessionRow{}
	}
	writeJSON(w, http.StatusOK, SessionList{Sessions: rows, Truncated: truncated})
}

// SessionList is GET /v1/sessions's answer, newest first.
type SessionList struct {
	Sessions  []SessionRow `json:"sessions"`
	Truncated bool         `json:"truncated"`
}

func preview(s string) string {
	if len(s) <= taskPreviewBytes {
		return s
	}
	return strings.ToValidUTF8(s[:taskPreviewBytes], "") + "…"
}

// SessionUsage is one session's final usage, an element of GET /v1/usage.
type SessionUsage struct {
	SessionID string               `json:"session_id"`
	Agent     string               `json:"agent"`
	Time      time.Time            `json:"time"`
	Report    protocol.UsageReport `json:"report"`
	// ModelCostUSD prices each model's share (absent for a model without a price).
	ModelCostUSD map[string]float64 `json:"model_cost_usd,omitempty"`
}

// usageReports reads the usage stream from `from` on; a session's last report wins (the miner's
// supersedes the planner's).
func (g *Gateway) usageReports(ctx context.Context, from time.Time) (map[string]SessionUsage, error) {
	out := map[string]SessionUsage{}
	err := bus.ReadStream(ctx, g.d.Conn.JS, g.d.Names.Stream(protocol.StreamUsage), g.d.Names.UsageAll(), bus.ReadFrom{Time: from},
		func(m *jetstream.RawStreamMsg) bool {
			var ev protocol.Event
			if protocol.Unmarshal(m.Data, &ev) != nil || ev.Report == nil {
				return true
			}
			out[ev.SessionID] = SessionUsage{SessionID: ev.SessionID, Agent: ev.Agent, Time: ev.Time, Report: *ev.Report}
			return true
		})
	if err != nil {
		return nil, fmt.Errorf("usage stream: %w", err)
	}
	return out, nil
}

// httpUsage lists the final usage of sessions that ended within since, oldest first, with each
// model's cost: the console charts them by agent and by model over time.
func (g *Gateway) httpUsage(w http.ResponseWriter, r *http.Request) {
	from, limit, ok := listParams(w, r)
	if !ok {
		return
	}
	reports, err := g.usageReports(r.Context(), from)
	if err != nil {
		httpRefuse(w, err)
		return
	}
	rows := make([]SessionUsage, 0, len(reports))
	for _, u := range reports {
		for model, mu := range u.Report.ByModel {
			if usd, known := usage.Cost(model, mu, ""); known {
				if u.ModelCostUSD == nil {
					u.ModelCostUSD = map[string]float64{}
				}
				u.ModelCostUSD[model] = usd
			}
		}
		rows = append(rows, u)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Time.Before(rows[j].Time) })
	truncated := len(rows) > limit
	rows = rows[len(rows)-min(limit, len(rows)):] // the newest
	writeJSON(w, http.StatusOK, UsageList{Since: from.UTC(), Sessions: rows, Truncated: truncated})
}

// UsageList is GET /v1/usage's answer: each session's last usage report, oldest first.
type UsageList struct {
	Since     time.Time      `json:"since"`
	Sessions  []SessionUsage `json:"sessions"`
	Truncated bool           `json:"truncated"`
}

// DeadLetter is one element of GET /v1/dlq: where the message came from and why it died.
type DeadLetter struct {
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"`
	Stream     string    `json:"stream"`
	Sequence   string    `json:"sequence"`
	Consumer   string    `json:"consumer"`
	Deliveries string    `json:"deliveries"`
	Reason     string    `json:"reason,omitempty"`
	Bytes      int       `json:"bytes"`
}

// httpDLQ lists the newest dead letters within since.
func (g *Gateway) httpDLQ(w http.ResponseWriter, r *http.Request) {
	from, limit, ok := listParams(w, r)
	if !ok {
		return
	}
	var rows []DeadLetter
	err := bus.ReadStream(r.Context(), g.d.Conn.JS, g.d.Names.Stream(protocol.StreamDLQ), g.d.Names.DLQAll(), bus.ReadFrom{Time: from},
		func(m *jetstream.RawStreamMsg) bool {
			h := m.Header
			rows = append(rows, DeadLetter{Time: m.Time.UTC(), Subject: h.Get(bus.HeaderDLQSubject), Stream: h.Get(bus.HeaderDLQStream),
				Sequence: h.Get(bus.HeaderDLQSequence), Consumer: h.Get(bus.HeaderDLQConsumer), Deliveries: h.Get(bus.HeaderDLQDeliveries),
				Reason: h.Get(bus.HeaderDLQReason), Bytes: len(m.Data)})
			if len(rows) > limit {
				rows = rows[1:] // keep the newest
			}
			return true
		})
	if err != nil {
		httpRefuse(w, fmt.Errorf("dlq stream: %w", err))
		return
	}
	if rows == nil {
		rows = []DeadLetter{}
	}
	writeJSON(w, http.StatusOK, rows)
}

// memoryCall asks memoryd, answering the HTTP request itself on failure with the failure's code
// (unavailable or timeout when memoryd does not answer, memoryd's own code when it refuses:
// not_found for an unknown entry) and returning false.
func (g *Gateway) memoryCall(w http.ResponseWriter, r *http.Request, op string, req protocol.Message, rep protocol.Reply) bool {
	ctx, cancel := context.WithTimeout(r.Context(), memoryCallTimeout)
	defer cancel()
	err := bus.Request(ctx, g.d.Conn.NC, g.d.Names.Memory(op), req, rep, memoryCallTimeout)
	if c := protocol.CodeOf(err); err != nil && (c == protocol.CodeUnavailable || c == protocol.CodeTimeout) {
		httpError(w, c, "memoryd is not answering on "+g.d.Names.Memory(op)+": start it (`skein up` runs it; memory.enabled must be true)")
		return false
	}
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		httpRefuse(w, fmt.Errorf("memoryd %s: %w", op, err))
		return false
	}
	return true
}

// memoryKind reads ?kind= (qKind): absent is def, what each endpoint showed before kinds existed;
// "all" is every kind (memory.KindAny).
func memoryKind(w http.ResponseWriter, r *http.Request, def string) (string, bool) {
	k, ok := qKind.read(w, r)
	switch {
	case !ok:
		return "", false
	case k == "":
		return def, true
	case k == "all":
		return memory.KindAny, true
	}
	return k, true
}

// httpMemoryList pages through entries: GET /v1/memory?agent=&kind=&tier=&status=active|superseded|retired|quarantined|all&offset=&limit=
func (g *Gateway) httpMemoryList(w http.ResponseWriter, r *http.Request) {
	tier, ok := qTier.read(w, r)
	if !ok {
		return
	}
	kind, ok := memoryKind(w, r, protocol.KindGuideline)
	if !ok {
		return
	}
	agent, ok := qAgent.read(w, r)
	if !ok {
		return
	}
	status, ok := qMemStatus.read(w, r)
	if !ok {
		return
	}
	req := protocol.MemoryListRequest{Agent: agent, Kind: kind, Tier: protocol.Tier(tier), Status: protocol.MemoryStatus(status)}
	switch status {
	case "", string(protocol.MemoryActive):
		req.Status = "" // memoryd's default
	case "all":
		req.Status = memory.StatusAny
	}
	if req.Offset, ok = qOffset.read(w, r); !ok {
		return
	}
	if req.Limit, ok = qMemLimit.read(w, r); !ok {
		return
	}
	var rep protocol.MemoryListReply
	if g.memoryCall(w, r, protocol.MemList, &req, &rep) {
		writeJSON(w, http.StatusOK, rep)
	}
}

// httpMemorySearch is inspect-memory over HTTP: counts per agent, tier and status, and the
// entries nearest q ranked as retrieval ranks them (the most established without q).
func (g *Gateway) httpMemorySearch(w http.ResponseWriter, r *http.Request) {
	tier, ok := qTier.read(w, r)
	if !ok {
		return
	}
	kind, ok := memoryKind(w, r, memory.KindAny)
	if !ok {
		return
	}
	agent, ok := qAgent.read(w, r)
	if !ok {
		return
	}
	text, ok := qText.read(w, r)
	if !ok {
		return
	}
	req := protocol.MemoryInspectRequest{Agent: agent, Kind: kind, Query: text, Tier: protocol.Tier(tier)}
	if req.TopK, ok = qTopK.read(w, r); !ok {
		return
	}
	var rep protocol.MemoryInspectReply
	if g.memoryCall(w, r, protocol.MemInspect, &req, &rep) {
		writeJSON(w, http.StatusOK, rep)
	}
}

func (g *Gateway) httpMemoryGet(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, protocol.IDMemory)
	if !ok {
		return
	}
	var rep protocol.MemoryGetReply
	if g.memoryCall(w, r, protocol.MemGet, &protocol.MemoryGetRequest{ID: id}, &rep) {
		writeJSON(w, http.StatusOK, rep.Entry)
	}
}

// RetireBody is POST /v1/memory/{id}/retire's optional body.
type RetireBody struct {
	Evict  bool   `json:"evict,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// httpMemoryRetire takes one entry out of retrieval: {"evict": false} retires it (kept, listed,
// never retrieved), {"evict": true} deletes it.
func (g *Gateway) httpMemoryRetire(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, protocol.IDMemory)
	if !ok {
		return
	}
	var in RetireBody
	if !decodeBody(w, r, smallBodyBytes, true, &in) {
		return
	}
	req := protocol.MemoryRetireRequest{ID: id, Evict: in.Evict, Reason: in.Reason, By: "http " + r.RemoteAddr}
	var rep protocol.MemoryRetireReply
	if g.memoryCall(w, r, protocol.MemRetire, &req, &rep) {
		writeJSON(w, http.StatusOK, rep)
	}
}
