package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestOperatorsEditSurvivesARoleRestart edits a stream with the JetStream API, as `nats stream
// edit` would, then starts a role (which provisions the mesh): the edit stays. Only `skein mesh
// apply` puts the config's limits back.
func TestOperatorsEditSurvivesARoleRestart(t *testing.T) {
	cfg := writeProject(t, faultAgent, faultScript)
	m := newProcMesh(t, cfg)
	c := m.c
	names := protocol.NewNames("")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	edit := func(age time.Duration) {
		s, err := c.JS.Stream(ctx, names.Stream(protocol.StreamWork))
		if err != nil {
			t.Fatal(err)
		}
		sc := s.CachedInfo().Config
		sc.MaxAge = age
		if _, err := c.JS.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	age := func() time.Duration {
		s, err := c.JS.Stream(ctx, names.Stream(protocol.StreamWork))
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge
	}
	edit(90 * time.Minute)
	p := m.start(t, "planner", "planner")
	poll.True(t, bustest.ReadyTimeout, "the planner's consumer", func() bool {
		_, err := c.JS.Consumer(ctx, names.Stream(protocol.StreamTasks), protocol.ConsumerPlanner)
		return err == nil
	})
	p.stop()
	again := m.start(t, "planner-again", "planner")
	waitForLine(t, again, "planner ready") // it has provisioned the mesh before it says so
	if got := age(); got != 90*time.Minute {
		t.Fatalf("a role's start changed the operator's max_age of WORK to %v", got)
	}
	r := skein(t, t.TempDir(), append(os.Environ(), m.env...), "", "mesh", "apply", "--nats", m.url, "--config", cfg)
	if r.code != 0 || !strings.Contains(r.stdout, "stream WORK: max_age 1h30m0s -> 168h0m0s") {
		t.Fatalf("skein mesh apply: %s", r)
	}
	if got, want := age(), bus.DefaultLimits().Streams[protocol.StreamWork].MaxAge; got != want {
		t.Fatalf("after skein mesh apply max_age is %v, want %v", got, want)
	}
}
