package main

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

//go:embed scaffold
var scaffoldFS embed.FS

// scaffoldNames maps embedded names to project paths (a file named .gitignore cannot be embedded
// by a plain pattern, so it is stored as gitignore).
var scaffoldNames = map[string]string{"gitignore": ".gitignore"}

func newInitCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "init [DIR]",
		Short: "Scaffold a runnable project: agent.yaml, an offline variant, an example tool",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return scaffold(cmd, dir, force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "overwrite files that already exist")
	return cmd
}

func scaffold(cmd *cobra.Command, dir string, force bool) error {
	out := cmd.OutOrStdout()
	var wrote, kept []string
	err := fs.WalkDir(scaffoldFS, "scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel("scaffold", p)
		if n, ok := scaffoldNames[rel]; ok {
			rel = n
		}
		dst := filepath.Join(dir, rel)
		if _, err := os.Stat(dst); err == nil && !force {
			kept = append(kept, rel)
			return nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		data, err := scaffoldFS.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		mode := os.FileMode(0o644)
		if filepath.Ext(dst) == ".py" {
			mode = 0o755
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		wrote = append(wrote, rel)
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range wrote {
		fmt.Fprintf(out, "  wrote %s\n", filepath.Join(dir, f))
	}
	for _, f := range kept {
		fmt.Fprintf(out, "  kept  %s (exists; --force overwrites)\n", filepath.Join(dir, f))
	}
	fmt.Fprintf(out, "\nNext:\n")
	if dir != "." {
		fmt.Fprintf(out, "  cd %s\n", dir)
	}
	fmt.Fprintf(out, "  skein run --config agent.offline.yaml \"Greet Ada\"   # offline, scripted model\n")
	fmt.Fprintf(out, "  export ANTHROPIC_API_KEY=...; skein run \"Greet Ada in French\"   # a real model\n")
	return nil
}
