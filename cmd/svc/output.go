package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/platform/timefmt"
)

// What every admin command shares: the service assembled for the one
// command, its result printed as JSON (--json) or as text and tables, and
// the operator it acts as (--as, operator.go).

// withApp assembles the service for cmd, runs with it and closes it.
// Checks of the arguments come before it: a command with bad flags says so
// without a database.
func withApp(cmd *cobra.Command, run func(a *app.App) error) error {
	a, err := openApp(cmd.Context())
	if err != nil {
		return err
	}
	defer a.Close()
	return run(a)
}

func jsonFlag(cmd *cobra.Command) bool {
	v, _ := cmd.Flags().GetBool("json")
	return v
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// show prints a command's result to its standard output: v as JSON with
// --json, else what text writes.
func show(cmd *cobra.Command, v any, text func(out io.Writer) error) error {
	out := cmd.OutOrStdout()
	if jsonFlag(cmd) {
		return printJSON(out, v)
	}
	return text(out)
}

// showLine is show for a result whose text is one line.
func showLine(cmd *cobra.Command, v any, format string, args ...any) error {
	return show(cmd, v, func(out io.Writer) error {
		fmt.Fprintf(out, format, args...)
		return nil
	})
}

// showVerdict shows a check's report r (text writes it as text), then
// fails with failed, after the report, unless the check passed: svc exits
// non-zero.
func showVerdict[R any](cmd *cobra.Command, r R, text func(out io.Writer, r R), passed bool, failed error) error {
	if err := show(cmd, r, func(out io.Writer) error { text(out, r); return nil }); err != nil {
		return err
	}
	if !passed {
		return failed
	}
	return nil
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

// printTable writes items as a table: header, then what row writes for
// each item (a row, or a row and lines under it). With none set, a list
// without items is that line instead of an empty table.
func printTable[T any](out io.Writer, none, header string, items []T, row func(tw io.Writer, x T)) error {
	if len(items) == 0 && none != "" {
		fmt.Fprintln(out, none)
		return nil
	}
	tw := table(out)
	fmt.Fprintln(tw, header)
	for _, x := range items {
		row(tw, x)
	}
	return tw.Flush()
}

// showTable shows items: as JSON with --json, else as printTable's table.
func showTable[T any](cmd *cobra.Command, none, header string, items []T, row func(tw io.Writer, x T)) error {
	return show(cmd, items, func(out io.Writer) error { return printTable(out, none, header, items, row) })
}

// viewsOf is each of xs as view makes it (what a command prints, JSON or
// row, of a module's rows).
func viewsOf[X, V any](xs []X, view func(X) V) []V {
	out := make([]V, len(xs))
	for i, x := range xs {
		out[i] = view(x)
	}
	return out
}

// printPage is printTable for a page of a list, and then, when there is
// a page after it (next is its cursor), the line that tells how to read it.
func printPage[T, C any](out io.Writer, none, header string, items []T, next *C, row func(tw io.Writer, x T)) error {
	if err := printTable(out, none, header, items, row); err != nil || len(items) == 0 {
		return err
	}
	if next != nil {
		fmt.Fprintf(out, "more: --cursor %v\n", *next)
	}
	return nil
}

// checkLimit checks a list's --limit.
func checkLimit(limit, most int) error {
	if limit < 1 || limit > most {
		return fmt.Errorf("--limit %d: want 1 to %d", limit, most)
	}
	return nil
}

func orDash(t *time.Time) string {
	if s := timefmt.Ptr(t); s != nil {
		return *s
	}
	return "-"
}

// holderName says whose a deposit or a withdrawal is: the user's id, or
// "platform:" and the platform account's name.
func holderName(user, platform *string) string {
	if platform != nil {
		return "platform:" + *platform
	}
	return dashIfNil(user)
}

func dashIfNil(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}
