package ingest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Eviction is one entry the capacity policy removes (or would).
type Eviction = protocol.MemoryEviction

func lastAt(e memory.Entry) time.Time {
	if e.LastUsed.After(e.Updated) {
		return e.LastUsed
	}
	return e.Updated
}

// capacity is the bound of one group of entries.
func (e *Engine) capacity(kind string) int {
	switch kind {
	case memory.KindCase:
		return e.opt.CaseCapacity
	case memory.KindSkill:
		return e.opt.SkillCapacity
	}
	return e.opt.Capacity
}

// Evict keeps every (agent, tier) of guidelines at or under the capacity, and every agent's cases
// and skills under theirs. It removes, in order, entries no
// longer active (kept while there is room, since their history and links say what was believed
// and why): retired ones, then quarantined, then superseded (which may still overturn the rule
// that replaced them); then the active ones of least worth (helpful - harmful marks plus
// utility: see worth); each group least recently used or updated first.
// agent "" means every agent. With dryRun it only reports.
func (e *Engine) Evict(ctx context.Context, agent string, dryRun bool) ([]Eviction, error) {
	all, err := e.store.List(ctx, memory.Filter{Agent: agent, Kind: memory.KindAny, Status: memory.StatusAny})
	if err != nil {
		return nil, fmt.Errorf("evict: list: %w", err)
	}
	groups := map[[3]string][]memory.Entry{}
	for _, x := range all {
		k := [3]string{x.Agent, x.KindOf(), string(x.Tier)}
		if x.KindOf() != memory.KindGuideline {
			k[2] = "" // cases and skills have one capacity per agent
		}
		groups[k] = append(groups[k], x)
	}
	keys := make([][3]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		for n := range 3 {
			if keys[i][n] != keys[j][n] {
				return keys[i][n] < keys[j][n]
			}
		}
		return false
	})
	var out []Eviction
	for _, k := range keys {
		g := groups[k]
		limit := e.capacity(k[1])
		over := len(g) - limit
		if over <= 0 {
			continue
		}
		SortForEviction(g)
		for _, x := range g[:over] {
			reason := fmt.Sprintf("over capacity %d: worth %.2f (helpful-harmful %d, utility %+.2f), last used %s", limit, worth(x), x.Helpful-x.Harmful, x.Utility, lastAt(x).Format(time.RFC3339))
			if x.Status != memory.StatusActive {
				reason = fmt.Sprintf("over capacity %d: %s", limit, x.Status)
			}
			out = append(out, Eviction{ID: x.ID, Agent: x.Agent, Kind: x.Kind, Tier: x.Tier, Status: x.Status, Text: x.Text,
				Helpful: x.Helpful, Harmful: x.Harmful, LastAt: lastAt(x), Reason: reason, Pol: x.Polarity})
			if dryRun {
				continue
			}
			if err := e.store.Delete(ctx, x.ID); err != nil && !errors.Is(err, memory.ErrNotFound) {
				return out, fmt.Errorf("evict %s: %w", x.ID, err)
			}
		}
	}
	return out, nil
}

// SortForEviction orders entries first-to-evict first.
func SortForEviction(g []memory.Entry) {
	sort.SliceStable(g, func(i, j int) bool {
		a, b := g[i], g[j]
		if ra, rb := evictRank(a.Status), evictRank(b.Status); ra != rb {
			return ra < rb
		}
		if sa, sb := worth(a), worth(b); sa != sb {
			return sa < sb
		}
		if ta, tb := lastAt(a), lastAt(b); !ta.Equal(tb) {
			return ta.Before(tb)
		}
		return a.ID < b.ID
	})
}

// utilityMarks is how many helpful marks a utility of 1 is worth when eviction compares entries:
// a guideline that is followed to success keeps its place over one that is merely retrieved.
const utilityMarks = 5

// worth orders active entries for eviction: helpful minus harmful marks, plus utility; a case
// also by its quality (worth two marks at 1.0), a skill by its confidence and confirmations.
func worth(x memory.Entry) float64 {
	w := float64(x.Helpful-x.Harmful) + utilityMarks*x.Utility
	switch {
	case x.Case != nil:
		w += 2 * x.Case.Quality
	case x.Skill != nil:
		w += 10*x.Skill.Confidence + float64(x.Skill.Confirmed)
	}
	return w
}

// evictRank orders statuses for eviction, first to go first.
func evictRank(s memory.Status) int {
	switch s {
	case memory.StatusRetired:
		return 0
	case memory.StatusQuarantined:
		return 1
	case memory.StatusSuperseded:
		return 2
	}
	return 3
}
