package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// utilityRate is how far one session moves an entry's utility towards +1 (echo) or -1 (fizzle):
// an exponential moving average, so recent uses weigh most and utility stays in [-1, 1].
const utilityRate = 0.3

// Feedback applies one session's marks. Each entry counts a session's feedback once, so a
// replayed session does not inflate counters. A followed entry counts as two helpful marks.
// Echo and fizzle move the entry's utility. Each mark enters the entry's window, and the
// life-cycle rules run on every entry that changed: a tactical lesson whose first helpful mark
// arrives is promoted, a strategic rule whose harmful marks outweigh its helpful ones is demoted
// (and the rules it had superseded judged again), a demoted one that goes on failing retired.
// It returns how many entries changed.
func (e *Engine) Feedback(ctx context.Context, req protocol.FeedbackRequest) (int, error) {
	if req.SessionID == "" {
		return 0, errors.New("feedback: session id is empty")
	}
	type delta struct {
		helpful, harmful int
		use              string
	}
	deltas := map[string]delta{}
	for _, id := range req.Helpful {
		d := deltas[id]
		d.helpful = max(d.helpful, 1)
		deltas[id] = d
	}
	for _, id := range req.Followed {
		d := deltas[id]
		d.helpful = 2
		deltas[id] = d
	}
	for _, id := range req.Harmful {
		d := deltas[id]
		d.harmful = 1
		deltas[id] = d
	}
	for _, id := range req.Echo {
		d := deltas[id]
		d.use = protocol.UseEcho
		deltas[id] = d
	}
	for _, id := range req.Fizzle {
		d := deltas[id]
		d.use = protocol.UseFizzle
		deltas[id] = d
	}
	ids := make([]string, 0, len(deltas))
	for id := range deltas {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	marker := "feedback/" + req.SessionID
	changed := 0
	for _, id := range ids {
		d := deltas[id]
		var rivals *memory.Entry
		err := e.retry(ctx, func() error {
			rivals = nil
			ent, err := e.store.Get(ctx, id)
			if errors.Is(err, memory.ErrNotFound) {
				return nil // evicted since it was retrieved
			}
			if err != nil {
				return err
			}
			if req.Agent != "" && ent.Agent != req.Agent {
				return nil
			}
			if slices.Contains(ent.Mined, marker) {
				return nil
			}
			now := e.opt.Now().UTC()
			ent.Helpful += d.helpful
			ent.Harmful += d.harmful
			switch d.use {
			case protocol.UseEcho:
				ent.Echoes++
				ent.Utility += utilityRate * (1 - ent.Utility)
			case protocol.UseFizzle:
				ent.Fizzles++
				ent.Utility += utilityRate * (-1 - ent.Utility)
			}
			ent.Marks = append(ent.Marks, protocol.MemoryMark{Session: req.SessionID, Helpful: d.helpful, Harmful: d.harmful, Use: d.use, At: now})
			if n := len(ent.Marks) - e.opt.FeedbackWindow; n > 0 {
				ent.Marks = slices.Clone(ent.Marks[n:])
			}
			ent.Mined = append(ent.Mined, marker)
			bound(&ent)
			ent.LastUsed = now
			standing := ent.Status == memory.StatusActive && ent.Tier == protocol.TierStrategic
			act, err := e.settle(ctx, ent, "", protocol.IngestAction{EntryID: id})
			if err != nil {
				return err
			}
			if act.Action != "" {
				e.opt.Logger.Info("memory feedback", "entry", id, "session", req.SessionID, "action", act.Action, "detail", act.Detail)
			}
			// A rule that lost evidence or standing may now lose to a rule it had superseded.
			if standing && (d.harmful > 0 || act.Action == ActDemoted) && len(ent.Supersedes) > 0 {
				rivals = &ent
			}
			changed++
			return nil
		})
		if err != nil {
			return changed, fmt.Errorf("feedback on %s: %w", id, err)
		}
		if rivals != nil {
			if err := e.reconsiderRivals(ctx, *rivals); err != nil {
				return changed, fmt.Errorf("feedback on %s: %w", id, err)
			}
		}
	}
	return changed, nil
}
