package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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

// listParams reads since (a Go duration) and limit from the query, answering a bad one itself.
func listParams(w http.ResponseWriter, r *http.Request) (from time.Time, limit int, ok bool) {
	since, limit := defaultSince, defaultListLimit
	q := r.URL.Query()
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			httpError(w, http.StatusBadRequest, "bad_request", "since must be a positive duration such as 24h, got "+strconv.Quote(v))
			return from, 0, false
		}
		since = d
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > maxListLimit {
			httpError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit must be 1..%d, got %q", maxListLimit, v))
			return from, 0, false
		}
		limit = n
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
	agent, ok := queryID(w, r, "agent", protocol.IDAgent)
	if !ok {
		return
	}
	text, ok := queryText(w, r, "q")
	if !ok {
		return
	}
	status, text := r.URL.Query().Get("status"), strings.ToLower(text)
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
		httpError(w, http.StatusInternalServerError, "internal", "sessions bucket: "+err.Error())
		return
	}
	keepNewest()
	if len(rows) > 0 {
		oldest := rows[len(rows)-1].Created
		reports, err := g.usageReports(ctx, oldest)
		if err != nil {
			httpError(w, http.StatusInternalServerError, "internal", err.Error())
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
		httpError(w, http.StatusInternalServerError, "internal", err.Error())
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
		httpError(w, http.StatusInternalServerError, "internal", "dlq stream: "+err.Error())
		return
	}
	if rows == nil {
		rows = []DeadLetter{}
	}
	writeJSON(w, http.StatusOK, rows)
}

// memoryCall asks memoryd, answering the HTTP request itself on failure (503 when memoryd is not
// serving, 404 for an unknown entry) and returning false.
func (g *Gateway) memoryCall(w http.ResponseWriter, r *http.Request, op string, req, rep protocol.Message, replyErr func() string) bool {
	ctx, cancel := context.WithTimeout(r.Context(), memoryCallTimeout)
	defer cancel()
	if err := bus.Request(ctx, g.d.Conn.NC, g.d.Names.Memory(op), req, rep, memoryCallTimeout); err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			httpError(w, http.StatusServiceUnavailable, "memory_unavailable",
				"memoryd is not answering on "+g.d.Names.Memory(op)+": start it (`skein up` runs it; memory.enabled must be true)")
			return false
		}
		httpError(w, http.StatusBadGateway, "memory_error", err.Error())
		return false
	}
	if msg := replyErr(); msg != "" {
		status, code := http.StatusBadGateway, "memory_error"
		if strings.Contains(msg, memory.ErrNotFound.Error()) {
			status, code = http.StatusNotFound, "not_found"
		}
		httpError(w, status, code, "memoryd "+op+": "+msg)
		return false
	}
	return true
}

func tierParam(w http.ResponseWriter, r *http.Request) (protocol.Tier, bool) {
	switch t := protocol.Tier(r.URL.Query().Get("tier")); t {
	case "", protocol.TierStrategic, protocol.TierTactical:
		return t, true
	default:
		httpError(w, http.StatusBadRequest, "bad_request", "tier must be strategic or tactical, got "+strconv.Quote(string(t)))
		return "", false
	}
}

// httpMemoryList pages through entries: GET /v1/memory?agent=&tier=&status=active|superseded|retired|quarantined|all&offset=&limit=
func (g *Gateway) httpMemoryList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tier, ok := tierParam(w, r)
	if !ok {
		return
	}
	agent, ok := queryID(w, r, "agent", protocol.IDAgent)
	if !ok {
		return
	}
	req := protocol.MemoryListRequest{Agent: agent, Tier: tier}
	switch st := q.Get("status"); st {
	case "", string(protocol.MemoryActive):
	case "all":
		req.Status = memory.StatusAny
	case string(protocol.MemorySuperseded), string(protocol.MemoryRetired), string(protocol.MemoryQuarantined):
		req.Status = protocol.MemoryStatus(st)
	default:
		httpError(w, http.StatusBadRequest, "bad_request", "status must be active, superseded, retired, quarantined or all, got "+strconv.Quote(st))
		return
	}
	for name, dst := range map[string]*int{"offset": &req.Offset, "limit": &req.Limit} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				httpError(w, http.StatusBadRequest, "bad_request", name+" must be a whole number, got "+strconv.Quote(v))
				return
			}
			*dst = n
		}
	}
	if req.Limit == 0 || req.Limit > defaultListLimit {
		req.Limit = defaultListLimit
	}
	var rep protocol.MemoryListReply
	if g.memoryCall(w, r, protocol.MemList, &req, &rep, func() string { return rep.Error }) {
		writeJSON(w, http.StatusOK, rep)
	}
}

// httpMemorySearch is inspect-memory over HTTP: counts per agent, tier and status, and the
// entries nearest q ranked as retrieval ranks them (the most established without q).
func (g *Gateway) httpMemorySearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tier, ok := tierParam(w, r)
	if !ok {
		return
	}
	agent, ok := queryID(w, r, "agent", protocol.IDAgent)
	if !ok {
		return
	}
	text, ok := queryText(w, r, "q")
	if !ok {
		return
	}
	req := protocol.MemoryInspectRequest{Agent: agent, Query: text, Tier: tier}
	if v := q.Get("top_k"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 100 {
			httpError(w, http.StatusBadRequest, "bad_request", "top_k must be 1..100, got "+strconv.Quote(v))
			return
		}
		req.TopK = n
	}
	var rep protocol.MemoryInspectReply
	if g.memoryCall(w, r, protocol.MemInspect, &req, &rep, func() string { return rep.Error }) {
		writeJSON(w, http.StatusOK, rep)
	}
}

func (g *Gateway) httpMemoryGet(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, protocol.IDMemory)
	if !ok {
		return
	}
	var rep protocol.MemoryGetReply
	if g.memoryCall(w, r, protocol.MemGet, &protocol.MemoryGetRequest{ID: id}, &rep, func() string { return rep.Error }) {
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
	if !decodeSmall(w, r, &in) {
		return
	}
	req := protocol.MemoryRetireRequest{ID: id, Evict: in.Evict, Reason: in.Reason, By: "http " + r.RemoteAddr}
	var rep protocol.MemoryRetireReply
	if g.memoryCall(w, r, protocol.MemRetire, &req, &rep, func() string { return rep.Error }) {
		writeJSON(w, http.StatusOK, rep)
	}
}

// decodeSmall reads an optional small JSON body into v (an empty body leaves v as it is),
// answering a malformed one itself.
func decodeSmall(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength == 0 {
		return true
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		httpError(w, http.StatusBadRequest, "bad_request", "malformed request body: "+err.Error())
		return false
	}
	return true
}
