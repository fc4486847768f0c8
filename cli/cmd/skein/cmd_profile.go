package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/memory/profile"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func init() { extraCommands = append(extraCommands, newProfileCmd) }

// newProfileCmd reviews the patches learning proposed to the agent's standing profile
// (agent.profile). It works on the files beside agent.yaml: no mesh is needed.
func newProfileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Review, apply, reject or revert learned patches of the agent's profile",
		Long: "The agent's profile (agent.profile) is a file only you write; the miner proposes patches to it\n" +
			"(a rule added to a section) when a lesson recurs across sessions with verbatim evidence, and\n" +
			"they wait here unless agent.profile_learning.auto_apply is set. Applied patches are overlaid on\n" +
			"the file when the executor builds its prompt, and every one can be reverted.",
	}
	var asJSON bool
	review := &cobra.Command{
		Use:   "review",
		Short: "Show the profile as the executor reads it, and every patch with its evidence and diff",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := profilePath(cmd)
			if err != nil {
				return err
			}
			text, l, err := profile.Load(path)
			if err != nil {
				return fail(protocol.ExitConfig, "%v", err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(struct {
					Profile string          `json:"profile"`
					Patches []profile.Patch `json:"patches"`
				}{profile.Render(text, l), l.Patches})
			}
			fmt.Fprintf(w, "%s\n", profile.Render(text, l))
			for _, p := range l.Patches {
				fmt.Fprintf(w, "\n%s  %s  section %q  %d tokens\n  rule: %s\n", p.ID, p.Status, p.Section, p.Tokens, p.Rule)
				if p.Reason != "" {
					fmt.Fprintf(w, "  reason: %s\n", p.Reason)
				}
				for _, q := range p.Evidence {
					fmt.Fprintf(w, "  evidence: session %s, %s: %q\n", q.Session, q.Tool, q.Text)
				}
				for _, h := range p.History {
					fmt.Fprintf(w, "  %s %s %s\n", h.At.Format(time.RFC3339), h.Action, h.Reason)
				}
				fmt.Fprintf(w, "%s", p.Diff)
			}
			return nil
		},
	}
	review.Flags().BoolVar(&asJSON, "json", false, "print the rendered profile and the patches as JSON")
	var reason string
	act := func(use, short string, do func(l *profile.Ledger, text, id string, lim profile.Limits) error) *cobra.Command {
		c := &cobra.Command{
			Use: use + " [--reason TEXT] PATCH", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cfg, err := loadConfig(cmd)
				if err != nil {
					return configError(err)
				}
				path, err := profilePath(cmd)
				if err != nil {
					return err
				}
				pl := cfg.Agent.ProfileLearning
				lim := profile.Limits{Budget: pl.MaxTokens, PatchBudget: pl.PatchTokens, MinSessions: pl.MinSessions, Section: pl.Section}
				if err := profile.Update(path, func(text string, l *profile.Ledger) error { return do(l, text, args[0], lim) }); err != nil {
					return fail(protocol.ExitDataErr, "%v", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "patch %s %s\n", args[0], use)
				return nil
			},
		}
		c.Flags().StringVar(&reason, "reason", "", "why (kept in the patch's history)")
		return c
	}
	by := func() string { return "by " + cliUser() + reasonSuffix(reason) }
	cmd.AddCommand(review,
		act("apply", "Apply a pending (or refused, once it fits) patch", func(l *profile.Ledger, text, id string, lim profile.Limits) error {
			return l.Apply(text, id, lim, time.Now(), by())
		}),
		act("reject", "Reject a pending patch; its rule is not proposed again", func(l *profile.Ledger, _, id string, _ profile.Limits) error {
			return l.Reject(id, time.Now(), by())
		}),
		act("revert", "Roll back an applied patch; the profile reads as before it", func(l *profile.Ledger, _, id string, _ profile.Limits) error {
			return l.Revert(id, time.Now(), by())
		}))
	return cmd
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

func profilePath(cmd *cobra.Command) (string, error) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return "", configError(err)
	}
	if cfg.Agent.Profile == "" {
		return "", fail(protocol.ExitConfig, "agent %s has no profile: set agent.profile to a file beside agent.yaml", cfg.Agent.Name)
	}
	return cfg.Agent.Profile, nil
}
