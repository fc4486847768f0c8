package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
)

func init() { extraCommands = append(extraCommands, newEvalCmd) }

// evalReport is `skein eval --json`; the console's eval view draws it.
type evalReport struct {
	Suite       string    `json:"suite"`
	Description string    `json:"description,omitempty"`
	Tasks       []string  `json:"tasks"`
	Model       string    `json:"model"`
	Rounds      int       `json:"rounds"`
	Fresh       bool      `json:"fresh"`
	At          time.Time `json:"at"`
	Arms        []evalArm `json:"arms"`
}

func newEvalCmd() *cobra.Command {
	var rounds int
	var memoryFlag, provider, model, out string
	var fresh, asJSON bool
	cmd := &cobra.Command{
		Use:   "eval SUITE",
		Short: "Run a suite of tasks for several rounds and print the learning curve, memory on and off",
		Long: "eval runs every task of SUITE (a folder: suite.yaml, the agent's config, tasks/*.yaml with a check each)\n" +
			"--rounds times on an embedded mesh, waiting after each session for the miner, so a round learns from\n" +
			"the ones before. With --memory both (the default) it runs the rounds twice, memory off then on, and\n" +
			"prints per round: success rate, first-try success (no tool call failed), tool failures, input and\n" +
			"output tokens, cost and wall time, side by side. Each arm starts from a fresh memory (a temporary\n" +
			"$SKEIN_HOME) unless --fresh=false, which runs the memory-on arm against $SKEIN_HOME's memory.\n" +
			"The suite's config says which model runs it; --provider and --model run it on another.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rounds < 1 || rounds > maxEvalRounds {
				return &exitError{code: protocol.ExitUsage, msg: fmt.Sprintf("skein: --rounds must be between 1 and %d, got %d", maxEvalRounds, rounds)}
			}
			var arms []bool
			switch memoryFlag {
			case "on":
				arms = []bool{true}
			case "off":
				arms = []bool{false}
			case "both":
				arms = []bool{false, true}
			default:
				return &exitError{code: protocol.ExitUsage, msg: fmt.Sprintf("skein: --memory must be on, off or both, got %q", memoryFlag)}
			}
			suite, err := loadSuite(args[0])
			if err != nil {
				return &exitError{code: protocol.ExitConfig, msg: "skein: " + err.Error()}
			}
			cfg, err := service.LoadConfig(filepath.Join(suite.Dir, suite.Config))
			if err != nil {
				return &exitError{code: protocol.ExitConfig, msg: "skein: eval suite " + suite.Name + ": " + err.Error()}
			}
			if provider != "" || model != "" {
				if provider != "" {
					cfg.LLM.Provider, cfg.LLM.Script = provider, ""
				}
				if model != "" {
					cfg.LLM.Model = model
				}
				if errs := cfg.Validate(); len(errs) > 0 {
					return &exitError{code: protocol.ExitConfig, msg: "skein: " + errs.Error()}
				}
			}
			if err := checkKeys(cfg, nil); err != nil {
				return err
			}
			rep := evalReport{Suite: suite.Name, Description: suite.Description, Model: cfg.LLM.Provider + ":" + cfg.LLM.Model,
				Rounds: rounds, Fresh: fresh, At: time.Now().UTC()}
			for _, t := range suite.Tasks {
				rep.Tasks = append(rep.Tasks, t.ID)
			}
			progress := cmd.ErrOrStderr()
			for _, on := range arms {
				arm, err := runEvalArm(cmd.Context(), suite, cfg, rounds, on, fresh, progress)
				if err != nil {
					return err
				}
				rep.Arms = append(rep.Arms, arm)
			}
			if out != "" {
				f, err := openPrivate(out)
				if err != nil {
					return err
				}
				enc := json.NewEncoder(f)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			printEval(cmd.OutOrStdout(), suite, rep.Model, rep.Arms)
			return nil
		},
	}
	cmd.Flags().IntVar(&rounds, "rounds", 3, "how many times to run the suite")
	cmd.Flags().StringVar(&memoryFlag, "memory", "both", "on, off, or both (side by side)")
	cmd.Flags().BoolVar(&fresh, "fresh", true, "start each arm from an empty memory (false: the memory-on arm uses $SKEIN_HOME's)")
	cmd.Flags().StringVar(&provider, "provider", "", "run on this model provider instead of the suite's (anthropic, openai, ...)")
	cmd.Flags().StringVar(&model, "model", "", "run on this model instead of the suite's")
	cmd.Flags().StringVar(&out, "out", "", "also write the JSON report to this file (the console's eval view reads it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the report as JSON: {"suite", "tasks", "model", "rounds", "fresh", "at", "arms": [{"memory", "rounds": [...]}]}`)
	return cmd
}

// runEvalArm starts an embedded mesh with memory on or off (in a temporary $SKEIN_HOME unless the
// memory-on arm runs against the current one) and runs the rounds on it.
func runEvalArm(ctx context.Context, suite *evalSuite, base *config.Config, rounds int, memoryOn, fresh bool, progress io.Writer) (evalArm, error) {
	name := "off"
	if memoryOn {
		name = "on"
	}
	arm := evalArm{Memory: name}
	home := service.Home()
	if fresh || !memoryOn {
		dir, err := os.MkdirTemp("", "skein-eval-")
		if err != nil {
			return arm, err
		}
		defer os.RemoveAll(dir)
		home = dir
	}
	cfg := evalConfig(base, memoryOn)
	fmt.Fprintf(progress, "skein eval %s: memory %s, %d rounds of %d tasks\n", suite.Name, name, rounds, len(suite.Tasks))
	mesh, err := startEmbedded(ctx, cfg, nil, home, "127.0.0.1:0", meshLogger(), "")
	if err != nil {
		return arm, err
	}
	defer mesh.stop()
	if memoryOn && !mesh.memoryOn {
		return arm, &exitError{code: protocol.ExitUnavailable, msg: "skein: eval: memoryd could not start, so memory cannot be on (its log line above says why; `make setup` installs the embedding model)"}
	}
	conn, err := mesh.conn("client")
	if err != nil {
		return arm, err
	}
	r := &evalRunner{suite: suite, conn: conn, names: protocol.NewNames(cfg.Mesh.Namespace), agent: cfg.Agent.Name,
		memoryOn: memoryOn && mesh.memoryOn, progress: progress}
	for n := 1; n <= rounds; n++ {
		round, err := r.round(ctx, n)
		if err != nil {
			return arm, &exitError{code: protocol.ExitInternal, msg: "skein: eval: " + err.Error()}
		}
		arm.Rounds = append(arm.Rounds, round)
	}
	return arm, nil
}
