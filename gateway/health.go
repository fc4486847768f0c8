package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Health is GET /v1/health: whether the mesh takes new sessions, and why not.
type Health struct {
	// OK: the mesh takes new sessions.
	OK bool `json:"ok"`
	// Storage is the store's state as the process that runs the embedded server reports it
	// (embedded.StorageWatch); its state is empty when nobody reports it (a NATS server of the
	// operator's own: its /healthz lists the streams that cannot write).
	Storage protocol.StorageReply `json:"storage"`
	// Memory is memoryd's health; absent when memoryd does not answer.
	Memory *protocol.MemoryHealthReply `json:"memory,omitempty"`
}

// httpHealth answers 200 when the mesh takes new sessions and 503 when it does not, with the
// same body, so a probe and an operator read one answer.
func (g *Gateway) httpHealth(w http.ResponseWriter, r *http.Request) {
	h := Health{Storage: g.d.Conn.Storage(r.Context(), g.d.Names, true)}
	h.OK = h.Storage.State.Accepting()
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var mem protocol.MemoryHealthReply
	if err := bus.Request(ctx, g.d.Conn.NC, g.d.Names.Memory(protocol.MemHealth), &protocol.MemoryHealthRequest{}, &mem, time.Second); err == nil {
		h.Memory = &mem
	}
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, &h)
}
