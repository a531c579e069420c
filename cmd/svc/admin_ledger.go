package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/hold"
	"svc/modules/ledger"
	"svc/modules/transfer"
)

// errLedgerInconsistent makes svc exit non-zero after the report is printed.
var errLedgerInconsistent = errors.New("ledger is inconsistent")

// adminLedgerCmd is `svc admin ledger`: the ledger's operator commands.
func adminLedgerCmd() *cobra.Command {
	c := &cobra.Command{Use: "ledger", Short: "Inspect the double-entry ledger; book corrections and transfers between custodies"}
	var incremental bool
	check := &cobra.Command{
		Use:   "check [--incremental]",
		Short: "Recompute every user balance and entry from the postings; exit 1 when anything is inconsistent",
		Long: "Compares every materialized user balance with the sum of its postings and with its newest\n" +
			"posting's running balance, checks that every entry's postings sum to zero on accounts of its asset,\n" +
			"lists negative user balances, and compares every user's held balance with the gross of their open\n" +
			"withdrawals (and each withdrawal's entries with its status), every transfer leg with its\n" +
			"ledger entry (and every transfer entry with its leg), and every escrow balance with the amount\n" +
			"of its payer's open holds (and each hold's entries with its status). It reads one consistent snapshot,\n" +
			"changes nothing in the ledger, and records its result (ledger_checks). Exit status 0 means\n" +
			"consistent, 1 inconsistent (or an error).\n\n" +
			"--incremental checks only what was committed since the last consistent check recorded (the\n" +
			"hourly reconciliation's, or this command's): those entries, their postings and the chain of\n" +
			"running balances, and every account written since against its newest posting. It takes\n" +
			"seconds or less where the full check takes a minute on a large ledger; with no check recorded\n" +
			"it is the full check.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				var r ledger.Report
				var err error
				if incremental {
					r, err = ledger.CheckIncremental(cmd.Context(), a.DB.Bun, app.LedgerChecks...)
				} else {
					r, err = ledger.Check(cmd.Context(), a.DB.Bun, app.LedgerChecks...)
				}
				if err != nil {
					return err
				}
				return showVerdict(cmd, r, printCheck, r.LedgerConsistent, errLedgerInconsistent)
			})
		},
	}
	check.Flags().BoolVar(&incremental, "incremental", false, "check only what was committed since the last consistent check, and the accounts written since")
	c.AddCommand(check, adminCheckpointCmd(), adminVerifyCmd(), adminExportCmd(), adminCorrectCmd(), adminTransferCmd())
	return c
}

// printCheck prints a ledger check's report: what it covered, each kind
// of finding with its list, and its verdict.
func printCheck(out io.Writer, r ledger.Report) {
	fmt.Fprintf(out, "checked %d accounts, %d entries, %d postings in %s\n", r.Accounts, r.Entries, r.Postings, r.Took.Round(time.Millisecond))
	fmt.Fprintf(out, "covered: %s\n", r.Coverage)
	var holds, escrow, legs, sweeps []string
	for _, s := range r.HoldMismatches {
		switch {
		case hold.IsEscrowFinding(s):
			escrow = append(escrow, s)
		case transfer.IsLegFinding(s):
			legs = append(legs, s)
		case ledger.IsSweepFinding(s):
			sweeps = append(sweeps, s)
		default:
			holds = append(holds, s)
		}
	}
	for _, sec := range []struct {
		title string
		list  []string
	}{
		{"materialized vs derived drifts", r.MaterializedVsDerivedDrifts},
		{"unbalanced entries", r.UnbalancedEntries},
		{"negative balances", r.NegativeBalances},
		{"holds vs open withdrawals", holds},
		{"escrow vs open holds", escrow},
		{"transfers vs their legs", legs},
		{"platform accounts' shard sweeps", sweeps},
		{"ignored records (beyond the snapshot or in the future)", r.IgnoredRecords},
	} {
		fmt.Fprintf(out, "%s: %d\n", sec.title, len(sec.list))
		for _, s := range sec.list {
			fmt.Fprintf(out, "  %s\n", s)
		}
	}
	if r.LedgerConsistent {
		fmt.Fprintln(out, "ledger consistent")
	} else {
		fmt.Fprintln(out, "LEDGER INCONSISTENT")
	}
}

// adminCheckpointCmd is `svc admin ledger checkpoint`.
func adminCheckpointCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "checkpoint",
		Short: "Seal the ledger entries committed since the last checkpoint now (the worker does it every LEDGER_CHECKPOINT_INTERVAL)",
		Long: "Seals the entries committed since the last checkpoint: a Merkle root over them, chained to the\n" +
			"previous checkpoint's hash and signed when LEDGER_CHECKPOINT_SIGNING_KEY is set (docs/checkpoints.md).\n" +
			"An entry is sealed once every transaction that started before its own has ended, so the newest\n" +
			"entries may wait for the next checkpoint. A run beside the worker's waits for it; nothing to seal\n" +
			"writes nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				cp, err := a.Checkpointer.Checkpoint(cmd.Context())
				if err != nil {
					return err
				}
				return show(cmd, cp, func(out io.Writer) error {
					if cp == nil {
						fmt.Fprintln(out, "nothing to seal: no entry committed since the last checkpoint is below the oldest running transaction")
						return nil
					}
					printCheckpoint(out, *cp)
					return nil
				})
			})
		},
	}
}

func printCheckpoint(out io.Writer, cp ledger.Checkpoint) {
	signed := "unsigned"
	if cp.Signature != nil {
		signed = "signed"
	}
	fmt.Fprintf(out, "checkpoint %d: %d entries, transactions [%d, %d), %s\n  root %x\n  hash %x\n  prev %x\n",
		cp.Seq, cp.EntryCount, cp.XidFrom, cp.XidTo, signed, []byte(cp.Root), []byte(cp.Hash), []byte(cp.PrevHash))
}

// adminVerifyCmd is `svc admin ledger verify`.
func adminVerifyCmd() *cobra.Command {
	var from int64
	c := &cobra.Command{
		Use:   "verify [--from N]",
		Short: "Recompute every checkpoint from the ledger's rows; exit 1 naming the first entry or checkpoint that does not match",
		Long: "Recomputes, on one snapshot, every checkpoint from N on (default 1): each sealed entry's leaf from its\n" +
			"row and postings, the root of the sealed leaves, each checkpoint's hash, the chain of hashes and\n" +
			"ranges, and the signatures when LEDGER_CHECKPOINT_SIGNING_KEY is set. It stops at the first\n" +
			"mismatch and names the entry or the checkpoint. Exit status 0 means everything matches, 1 a\n" +
			"mismatch (or an error). Entries not yet sealed are not looked at.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				var pub ed25519.PublicKey
				if a.Checkpointer.Key != nil {
					pub, _ = a.Checkpointer.Key.Public().(ed25519.PublicKey)
				}
				r, err := ledger.VerifyCheckpoints(cmd.Context(), a.DB.Bun, from, pub)
				if err != nil {
					return err
				}
				return showVerdict(cmd, r, printVerify, r.OK, errCheckpointMismatch)
			})
		},
	}
	c.Flags().Int64Var(&from, "from", 1, "the first checkpoint to verify (its predecessor's hash is trusted)")
	return c
}

// printVerify prints a verification's report and its verdict.
func printVerify(out io.Writer, r ledger.VerifyReport) {
	fmt.Fprintf(out, "checked %d checkpoints from %d, %d entries; signatures: %s\n", r.Checkpoints, r.From, r.Entries, r.Signatures)
	for _, seq := range r.Ignored {
		fmt.Fprintf(out, "ignored checkpoint %d: its range is beyond the snapshot or its time in the future; no checkpoint of the service is written so\n", seq)
	}
	if r.OK {
		fmt.Fprintln(out, "checkpoints match the ledger")
	} else {
		fmt.Fprintf(out, "MISMATCH: %s\n", r.Mismatch)
	}
}

// errCheckpointMismatch makes svc exit non-zero after the report.
var errCheckpointMismatch = errors.New("the ledger does not match its checkpoints")

// adminExportCmd is `svc admin ledger export`.
func adminExportCmd() *cobra.Command {
	var seq int64
	var file string
	c := &cobra.Command{
		Use:   "export --checkpoint N [--out FILE]",
		Short: "Write a checkpoint's entries with their inclusion proofs, for svc ledger verify-export",
		Long: "Writes checkpoint N with every entry it sealed, each with its leaf and its inclusion proof, as JSON\n" +
			"(docs/checkpoints.md). Whoever has the file and the published root (or the public key) checks it\n" +
			"offline with svc ledger verify-export, without a database.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				x, err := ledger.ExportCheckpoint(cmd.Context(), a.DB.Bun, seq)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if file == "" || file == "-" {
					return json.NewEncoder(out).Encode(x)
				}
				f, err := os.Create(file)
				if err != nil {
					return err
				}
				if err := json.NewEncoder(f).Encode(x); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				fmt.Fprintf(out, "wrote checkpoint %d (%d entries) to %s\n", seq, len(x.Entries), file)
				return nil
			})
		},
	}
	c.Flags().Int64Var(&seq, "checkpoint", 0, "the checkpoint's number (seq)")
	c.Flags().StringVar(&file, "out", "", "write to this file instead of standard output")
	_ = c.MarkFlagRequired("checkpoint")
	return c
}

// ledgerVerifyExportCmd is `svc ledger verify-export`: it needs no
// database and no configuration.
func ledgerVerifyExportCmd() *cobra.Command {
	var root, hash, key string
	verify := &cobra.Command{
		Use:   "verify-export FILE [--root HEX] [--hash HEX] [--public-key KEY]",
		Short: "Check an export of svc admin ledger export offline; exit 1 when anything does not match",
		Long: "Checks a checkpoint export with nothing but the file: the checkpoint's hash over its fields, every\n" +
			"entry's leaf recomputed from its fields and its inclusion proof up to the root, their positions and\n" +
			"order. With --root or --hash (as published) it also compares those, and with --public-key (the\n" +
			"32-byte Ed25519 key of GET /v1/admin/ledger/checkpoints/key, hex or base64) the signature.\n" +
			"Exit status 0 means the export is intact, 1 that it is not.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var chk ledger.ExportCheck
			var err error
			if root != "" {
				if chk.Root, err = decodeHash(root); err != nil {
					return fmt.Errorf("--root: %w", err)
				}
			}
			if hash != "" {
				if chk.Hash, err = decodeHash(hash); err != nil {
					return fmt.Errorf("--hash: %w", err)
				}
			}
			if key != "" {
				b, err := decodeKey(key)
				if err != nil {
					return fmt.Errorf("--public-key: %w", err)
				}
				chk.PublicKey = b
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			x, err := ledger.VerifyExport(f, chk)
			out := cmd.OutOrStdout()
			if err != nil {
				fmt.Fprintf(out, "NOT VERIFIED: %v\n", err)
				return errExportInvalid
			}
			what := "root and hash consistent"
			if chk.PublicKey != nil {
				what += ", signature valid"
			}
			fmt.Fprintf(out, "checkpoint %d verified: %d entries, transactions [%d, %d), %s\n  root %x\n  hash %x\n",
				x.Checkpoint.Seq, len(x.Entries), x.Checkpoint.XidFrom, x.Checkpoint.XidTo, what, []byte(x.Checkpoint.Root), []byte(x.Checkpoint.Hash))
			return nil
		},
	}
	verify.Flags().StringVar(&root, "root", "", "the published root (hex): the export's must be it")
	verify.Flags().StringVar(&hash, "hash", "", "the published checkpoint hash (hex): the export's must be it")
	verify.Flags().StringVar(&key, "public-key", "", "the Ed25519 public key (hex or base64): the checkpoint must carry its signature")
	return verify
}

var errExportInvalid = errors.New("the export does not verify")

func decodeHash(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("must be 64 hex digits")
	}
	return b, nil
}

func decodeKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("must be a 32-byte Ed25519 public key in hex or base64")
}
