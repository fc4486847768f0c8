package main

import (
	"bufio"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/toon"
)

func init() { extraCommands = append(extraCommands, newToonCmd) }

// newToonCmd is `skein toon encode|decode`: JSON on stdin to TOON on stdout
// and back, with the codec of pkg/toon.
func newToonCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "toon",
		Short: "Convert between JSON and TOON (spec " + toon.SpecVersion + ") on stdin/stdout",
	}

	var delimiter string
	var encIndent int
	encode := &cobra.Command{
		Use:   "encode",
		Short: "Read JSON from stdin, write TOON to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := toon.ParseDelimiter(delimiter)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			if err := toon.EncodeJSON(cmd.InOrStdin(), w, toon.EncodeOptions{Delimiter: d, IndentSize: encIndent}); err != nil {
				return fmt.Errorf("toon encode: %w", err)
			}
			// A terminal line end; decoders accept it (spec §12).
			if err := w.WriteByte('\n'); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	encode.Flags().StringVar(&delimiter, "delimiter", "comma", "document delimiter: comma, tab or pipe (or the character itself)")
	encode.Flags().IntVar(&encIndent, "indent", 2, "spaces per indentation level")

	var decIndent int
	var strict bool
	decode := &cobra.Command{
		Use:   "decode",
		Short: "Read TOON from stdin, write JSON to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("no-strict") {
				strict = false
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			if err := toon.DecodeToJSON(cmd.InOrStdin(), w, toon.DecodeOptions{IndentSize: decIndent, NonStrict: !strict}); err != nil {
				return fmt.Errorf("toon decode: %w", err)
			}
			return w.Flush()
		},
	}
	decode.Flags().IntVar(&decIndent, "indent", 2, "spaces per indentation level")
	decode.Flags().BoolVar(&strict, "strict", true, "enforce every strict-mode rule of the specification")
	decode.Flags().Bool("no-strict", false, "lenient decoding as the specification permits (same as --strict=false)")

	cmd.AddCommand(encode, decode)
	return cmd
}
