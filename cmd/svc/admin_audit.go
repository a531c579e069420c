package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/audit"
	"svc/modules/operator"
)

// adminAuditCmd is `svc admin audit`: the operator audit trail, as
// GET /v1/admin/audit serves it.
func adminAuditCmd() *cobra.Command {
	var (
		limit          int
		cursor         int64
		action, target string
	)
	c := &cobra.Command{
		Use:   "audit [--limit 50] [--cursor ID] [--action A] [--target T]",
		Short: "List the operator audit trail, newest first",
		Long: `List the operator audit trail, newest first: who (op:NAME, an enrolled operator whose signature
the row carries; an admin key id; or cli:NAME, the command line's login name) did what (deposit.resolve, apikey.mint, apikey.revoke, event.redeliver, asset.set_limits,
withdrawal.approve, ...) to which resource, when, with the digest and the parameters of the
request. Entries are never changed or deleted; svc admin audit verify checks that none was.

--cursor takes the id printed after a full page (next_cursor with --json) to read the next one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit, audit.MaxListLimit); err != nil {
				return err
			}
			p := audit.ListParams{Limit: limit, Action: action, Target: target}
			if cmd.Flags().Changed("cursor") {
				if cursor < 1 {
					return fmt.Errorf("--cursor %d: want a positive entry id", cursor)
				}
				p.Cursor = &cursor
			}
			return withApp(cmd, func(a *app.App) error {
				entries, next, err := audit.List(cmd.Context(), a.DB.Bun, p)
				if err != nil {
					return err
				}
				page := audit.ToListView(entries, next)
				return show(cmd, page, func(out io.Writer) error {
					return printPage(out, "no audit entries", "ID\tAT\tACTOR\tACTION\tTARGET\tDETAIL", page.Entries, page.NextCursor, func(tw io.Writer, e audit.View) {
						actor := audit.Actor{ID: e.Actor, Label: e.ActorLabel}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At, actor, e.Action, e.Target, e.Detail)
					})
				})
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", audit.DefaultListLimit, fmt.Sprintf("at most this many entries (1 to %d)", audit.MaxListLimit))
	c.Flags().Int64Var(&cursor, "cursor", 0, "the next cursor of the previous page: entries older than this id")
	c.Flags().StringVar(&action, "action", "", "only this action, e.g. deposit.resolve")
	c.Flags().StringVar(&target, "target", "", "only this target: a deposit, withdrawal, key or event id, or an asset code")
	c.AddCommand(adminAuditVerifyCmd(), adminAuditExportCmd())
	return c
}

// errAuditUnverified makes svc exit non-zero after the verification's
// report.
var errAuditUnverified = errors.New("the audit trail does not verify")

// adminAuditVerifyCmd is `svc admin audit verify`: the database's trail,
// or an export's (--file, which needs no database and no configuration).
func adminAuditVerifyCmd() *cobra.Command {
	var (
		file          string
		allowUnsigned bool
	)
	c := &cobra.Command{
		Use:   "verify [--file EXPORT] [--allow-unsigned] [--json]",
		Short: "Verify the audit trail's hash chain, every operator signature and the enrollment chain; exit 1 naming every failing row",
		Long: `Reads the whole audit trail and the operators' enrollment chain (from the database, or from an
export of svc admin audit export with --file, which needs no database and no configuration; - reads
standard input) and checks, with the same code either way:

  - the trail's hash chain: seq 1, 2, ... without a gap, each row's prev_hash the hash of the row
    before, each hash sha256(prev_hash || the row's canonical text), and the canonical text's
    elements the row's own columns: a row changed after it was recorded is named;
  - every signed row: its signature verifies with the key the enrollment chain enrolled (revoked
    since is fine), its statement's action and resource are the row's action and target, and its
    operator, key_id and nonce are the statement's and its key's operator;
  - an unsigned row of an action that is signed (withdrawal and deposit decisions, redeliveries,
    limits, ledger corrections and transfers, API keys, operators) fails: it was recorded while
    OPERATOR_SIGNATURES was off, or inserted by hand; --allow-unsigned lists them as warnings;
  - the enrollment chain replays, and the operators and operator_keys tables are what it proves.

Exit status 0 means everything verifies, 1 that something does not (each failure is listed: the
row's seq and id, and why). It ends with the trail's head (its last seq and hash): note it, and
compare an export's with it, since someone with the file can rewrite it whole.
docs/operations.md, "Operators", says what this proves and what it cannot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verify := func(x operator.AuditExport) error {
				rep := operator.VerifyAudit(x, allowUnsigned)
				return showVerdict(cmd, rep, printAuditReport, rep.OK, errAuditUnverified)
			}
			if file != "" {
				x, err := readAuditExport(cmd, file)
				if err != nil {
					return err
				}
				return verify(x)
			}
			return withApp(cmd, func(a *app.App) error {
				x, err := operator.ExportAudit(cmd.Context(), a.DB.Bun, a.Operators.RP, a.Clock.Now())
				if err != nil {
					return err
				}
				return verify(x)
			})
		},
	}
	c.Flags().StringVar(&file, "file", "", "verify this export (svc admin audit export) instead of the database; - reads standard input")
	c.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "list unsigned rows of signed actions as warnings instead of failures")
	return c
}

// readAuditExport reads an export from path, or standard input for "-".
func readAuditExport(cmd *cobra.Command, path string) (operator.AuditExport, error) {
	if path == "-" {
		return operator.ReadAuditExport(cmd.InOrStdin())
	}
	f, err := os.Open(path)
	if err != nil {
		return operator.AuditExport{}, err
	}
	defer f.Close()
	return operator.ReadAuditExport(f)
}

// printAuditReport prints a verification: what it read, each failure and
// warning, the heads, and its verdict.
func printAuditReport(out io.Writer, r operator.AuditReport) {
	fmt.Fprintf(out, "checked %d audit rows (%d signed, %d unsigned of signed actions) and %d enrollment records\n",
		r.Rows, r.Signed, r.Unsigned, r.OperatorRecords)
	for _, f := range r.Failures {
		fmt.Fprintf(out, "FAILED %s\n", f)
	}
	for _, f := range r.Warnings {
		fmt.Fprintf(out, "warning %s\n", f)
	}
	if r.Rows > 0 {
		fmt.Fprintf(out, "trail head: seq %d hash %s\n", r.HeadSeq, r.HeadHash)
	}
	if r.ChainHead != "" {
		fmt.Fprintf(out, "enrollment chain head: %s\n", r.ChainHead)
	}
	if r.OK {
		fmt.Fprintln(out, "verified: the hash chain links every row, every signature verifies, the operators are the enrollment chain's")
	} else {
		fmt.Fprintf(out, "NOT VERIFIED: %d failure(s)\n", len(r.Failures))
	}
}

// adminAuditExportCmd is `svc admin audit export`.
func adminAuditExportCmd() *cobra.Command {
	var file string
	c := &cobra.Command{
		Use:   "export [--out FILE]",
		Short: "Write the audit trail and the enrollment chain as one JSON document, for svc admin audit verify --file",
		Long: `Writes, read at one snapshot, every audit row (its columns, its prev_hash and hash, and the canonical
text its hash covers), every record of the operators' enrollment chain, the rows of the operators
and operator_keys tables, and the passkey relying party, as one JSON document
({"format": "svc-audit-export", "version": 1, ...}; docs/operations.md, "Operators"). An existing
FILE is never overwritten; without --out (or with -) it goes to standard output. Whoever has it
verifies it with svc admin audit verify --file FILE, without a database or configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				x, err := operator.ExportAudit(cmd.Context(), a.DB.Bun, a.Operators.RP, a.Clock.Now())
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if file == "" || file == "-" {
					return printJSON(out, x)
				}
				f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return err
				}
				if err := json.NewEncoder(f).Encode(x); err != nil {
					_ = f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				fmt.Fprintf(out, "wrote %d audit rows and %d enrollment records to %s\n", len(x.AuditLog), len(x.OperatorRecords), file)
				return nil
			})
		},
	}
	c.Flags().StringVar(&file, "out", "", "write to this new file instead of standard output")
	return c
}
