package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/memory/profile"
)

func runProfile(t *testing.T, cfg string, args ...string) (string, error) {
	t.Helper()
	out, _, err := runSkein(t, time.Minute, nil, append([]string{"--config", cfg, "profile"}, args...)...)
	return out, err
}

// A pending patch is applied by a reviewer, reverted, and the profile reads as before; the
// history names each step.
func TestProfileReviewApplyRevert(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, []byte("agent:\n  name: clerk\n  profile: profile.md\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "profile.md")
	if err := os.WriteFile(path, []byte("# Clerk\nYou file reports.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const rule = "report_tool: pass dates as DD/MM/YYYY."
	err := profile.Update(path, func(_ string, l *profile.Ledger) error {
		l.Patches = append(l.Patches, profile.Patch{ID: "p-1", Key: "k", Section: "Learned rules", Rule: rule, Tokens: 12, Status: profile.Pending,
			Evidence: []profile.Quote{{Session: "s-1", Tool: "report_tool", Text: "want DD/MM/YYYY"}},
			History:  []profile.Event{{At: time.Unix(0, 0), Action: "proposed"}}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	review := func() (string, []profile.Patch) {
		t.Helper()
		out, err := runProfile(t, cfg, "review", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Profile string          `json:"profile"`
			Patches []profile.Patch `json:"patches"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return r.Profile, r.Patches
	}
	before, _ := review()
	if strings.Contains(before, rule) {
		t.Fatalf("a pending patch is in the profile:\n%s", before)
	}
	if _, err := runProfile(t, cfg, "revert", "p-1"); err == nil {
		t.Fatal("a pending patch was reverted")
	}
	if _, err := runProfile(t, cfg, "apply", "--reason", "checked the tool", "p-1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := review(); !strings.Contains(got, "## Learned rules\n- "+rule) {
		t.Fatalf("applied patch missing:\n%s", got)
	}
	if _, err := runProfile(t, cfg, "revert", "p-1"); err != nil {
		t.Fatal(err)
	}
	got, ps := review()
	if got != before {
		t.Errorf("after revert:\n%s\nwant:\n%s", got, before)
	}
	var actions []string
	for _, h := range ps[0].History {
		actions = append(actions, h.Action+" "+h.Reason)
	}
	if ps[0].Status != profile.Reverted || len(actions) != 3 || !strings.Contains(actions[1], "checked the tool") {
		t.Errorf("patch %s, history %q", ps[0].Status, actions)
	}
}
