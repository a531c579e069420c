package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/money"
)

// errNotConfirmed makes svc exit non-zero when the operator did not
// confirm a booking: nothing was posted.
var errNotConfirmed = errors.New("not confirmed: nothing was posted (answer yes, or pass --yes)")

// bookingChecks checks what every booking needs: --memo, whose absence
// missing explains, and, unless it is a dry run, the operator's key that
// signs it (--key, else $SVC_OPERATOR_KEY).
func bookingChecks(key, memo, missing string, dryRun bool) error {
	if strings.TrimSpace(memo) == "" {
		return fmt.Errorf("--memo TEXT is required: %s", missing)
	}
	if dryRun {
		return nil
	}
	return requireKey(key)
}

// parseAccount reads "custody" or "user_available:EXTERNAL_USER_ID".
func parseAccount(s string) (ledger.Account, error) {
	kind, owner, _ := strings.Cut(s, ":")
	k := ledger.AccountKind(kind)
	if !k.Valid() {
		return ledger.Account{}, fmt.Errorf("%q is not an account (one of %s, or user_available:EXTERNAL_USER_ID)", kind, kindList(ledger.CorrectionAccounts()))
	}
	return ledger.Account{Kind: k, Owner: owner}, nil
}

func kindList(ks []ledger.AccountKind) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = string(k)
	}
	return strings.Join(parts, ", ")
}

// parseLines reads --debit and --credit ACCOUNT=UNITS, debits first.
func parseLines(debits, credits []string) ([]ledger.Line, error) {
	var out []ledger.Line
	for _, side := range []struct {
		flag string
		list []string
		sign int64
	}{{"debit", debits, -1}, {"credit", credits, 1}} {
		for _, v := range side.list {
			acct, amt, ok := strings.Cut(v, "=")
			if !ok {
				return nil, fmt.Errorf("--%s %q: want ACCOUNT=UNITS, e.g. network_fees=1200", side.flag, v)
			}
			a, err := parseAccount(acct)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: %w", side.flag, v, err)
			}
			n, err := money.ParseUnits(amt, true)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: %w (smallest units: sat for BTC and BTC_LN)", side.flag, v, err)
			}
			out = append(out, ledger.Line{Account: a, Amount: side.sign * n})
		}
	}
	return out, nil
}

// refused turns a booking's 422 into the lines the operator reads.
func refused(what string, err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) && len(fe.Fields) > 0 {
		msgs := make([]string, len(fe.Fields))
		for i, f := range fe.Fields {
			msgs[i] = f.Msg
		}
		return fmt.Errorf("%s refused, nothing was posted: %s", what, strings.Join(msgs, "; "))
	}
	return fmt.Errorf("%s refused, nothing was posted: %w", what, err)
}

// printBooking shows a booking's entries and lines with the balances
// before and after.
func printBooking(w io.Writer, b ledger.Booked, decimals map[string]int) {
	for i, e := range b.Entries {
		id := "to post"
		if i < len(b.Posted) {
			id = fmt.Sprintf("entry %d", b.Posted[i].ID)
			if b.Posted[i].Replayed {
				id += ", posted before"
			}
		}
		fmt.Fprintf(w, "%s %s (%s), %s\n  memo: %s\n", e.Asset, e.Kind, e.SourceRef, id, e.Memo)
	}
	_ = printTable(w, "", "  ASSET\tACCOUNT\tDEBIT\tCREDIT\tBALANCE BEFORE\tBALANCE AFTER", b.Lines, func(tw io.Writer, l ledger.LineBalance) {
		d := decimals[l.Asset]
		debit, credit := "", ""
		if l.Amount < 0 {
			debit = money.Format(-l.Amount, d)
		} else {
			credit = money.Format(l.Amount, d)
		}
		before, after := money.Format(l.Before, d), money.Format(l.After, d)
		if b.Replayed() {
			before, after = "-", "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", l.Asset, l.Account, debit, credit, before, after)
	})
}

// confirm asks on in whether to go on; only "y" or "yes" does. No answer
// (standard input closed, as in a script) is no.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	fmt.Fprintln(out)
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// booking is what a booking command runs: show the entry, ask, sign,
// post. P is what it books (a correction, a transfer), with its ledger's
// preview, what the operator signs (with the assets' decimals by code) and
// the booking of p signed with env.
type booking[P any] struct {
	what    string // "correction", "transfer"
	codes   []string
	p       P
	preview func(ctx context.Context, idb bun.IDB, p P) (ledger.Booked, error)
	expect  func(p P, decimals map[string]int) operator.Expect
	book    func(ctx context.Context, idb bun.IDB, ops *operator.Service, now time.Time, p P, env *operator.Envelope) (ledger.Booked, error)
}

func runBooking[P any](cmd *cobra.Command, bk booking[P], key string, yes, dryRun bool) error {
	return withApp(cmd, func(a *app.App) error {
		ctx := cmd.Context()
		decimals := map[string]int{}
		for _, code := range bk.codes {
			x, err := a.Assets.Get(ctx, code)
			if err != nil {
				return fmt.Errorf("%s: %w", code, err)
			}
			decimals[code] = x.Decimals
		}
		// With --json the result alone goes to standard output.
		preview := cmd.OutOrStdout()
		if jsonFlag(cmd) {
			preview = cmd.ErrOrStderr()
		}
		b, err := bk.preview(ctx, a.DB.Bun, bk.p)
		if err != nil {
			return refused("the "+bk.what, err)
		}
		printBooking(preview, b, decimals)
		if dryRun {
			fmt.Fprintf(preview, "dry run: nothing was posted\n")
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), ledger.ViewOf(b, decimals, true))
			}
			return nil
		}
		if !yes && !confirm(cmd.InOrStdin(), preview, "Post this "+bk.what+"?") {
			return errNotConfirmed
		}
		env, err := signWith(key, bk.expect(bk.p, decimals))
		if err != nil {
			return err
		}
		b, err = bk.book(ctx, a.DB.Bun, a.Operators, a.Clock.Now(), bk.p, env)
		if err != nil {
			return refused("the "+bk.what, err)
		}
		return show(cmd, ledger.ViewOf(b, decimals, false), func(out io.Writer) error {
			if b.Replayed() {
				fmt.Fprintf(out, "this %s was posted before with the same lines; nothing changed\n", bk.what)
			} else {
				fmt.Fprintf(out, "posted by %s; audit record %d\n", signedBy(ctx, a, env), b.AuditID)
			}
			printBooking(out, b, decimals)
			return nil
		})
	})
}

// adminCorrectCmd is `svc admin ledger correct`.
func adminCorrectCmd() *cobra.Command {
	var (
		code, memo, ref, key string
		debits, credits      []string
		yes, dryRun          bool
	)
	c := &cobra.Command{
		Use:   "correct --asset ASSET --memo TEXT --key FILE --debit ACCOUNT=UNITS... --credit ACCOUNT=UNITS... [--ref REF] [--yes | --dry-run]",
		Short: "Post a balanced, audited correction entry; shows it with the balances before and after, then asks",
		Long: `Posts a correction entry: lines that balance (debits equal credits), in one asset, with a memo
saying why, signed with an enrolled admin's key (--key, default $SVC_OPERATOR_KEY) and recorded in the
audit trail as op:NAME (ledger.correct) in the same transaction. It never edits an earlier entry. Every
amount is an integer in the asset's smallest unit.

ACCOUNT is custody, network_fees, fee_income, suspense, or user_available:EXTERNAL_USER_ID. user_hold,
in_flight and transfer are refused (release a withdrawal instead; transfers between custodies have
their own command). No line may leave a balance below zero. Balances are shown in each account's own
sense: custody and network_fees grow with a debit, the others with a credit.

The entry, every line's account, amount and the balance before and after it are shown first; then
the command asks for confirmation on standard input, then signs what it showed: the asset, every
line's account and amount in display units, the memo and the reference. --yes posts without asking;
with no answer (standard input closed) nothing is posted. --dry-run shows the entry and stops (no
key needed). --ref names the
correction (source_ref correction:REF): posting the same reference again with the same lines changes
nothing. docs/reconciliation.md ("Booking what the chain did") has the usual bookings, e.g. a
Lightning routing fee:

  svc admin ledger correct --asset BTC_LN --debit network_fees=12 --credit custody=12 \
    --memo "routing fees of withdrawal ..." --key alice.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bookingChecks(key, memo, "say why the correction is booked", dryRun); err != nil {
				return err
			}
			lines, err := parseLines(debits, credits)
			if err != nil {
				return err
			}
			if ref == "" {
				ref = uuid.NewString()
			}
			p := ledger.OperatorCorrection{Asset: code, Reference: ref, Memo: memo, Lines: lines}
			return runBooking(cmd, booking[ledger.OperatorCorrection]{what: "correction", codes: []string{code}, p: p,
				preview: ledger.PreviewCorrection,
				expect: func(p ledger.OperatorCorrection, d map[string]int) operator.Expect {
					return ledger.CorrectionExpect(p, d[p.Asset])
				},
				book: func(ctx context.Context, idb bun.IDB, ops *operator.Service, now time.Time, p ledger.OperatorCorrection, env *operator.Envelope) (ledger.Booked, error) {
					p.Signature = env
					return ledger.BookCorrection(ctx, idb, ops, now, p, nil)
				}}, key, yes, dryRun)
		},
	}
	c.Flags().StringVar(&code, "asset", "", "the asset of every line")
	c.Flags().StringVar(&memo, "memo", "", "why (required; kept on the entry and in the audit trail)")
	keyFlag(c, &key)
	c.Flags().StringArrayVar(&debits, "debit", nil, "ACCOUNT=UNITS to debit (repeatable)")
	c.Flags().StringArrayVar(&credits, "credit", nil, "ACCOUNT=UNITS to credit (repeatable)")
	c.Flags().StringVar(&ref, "ref", "", "the correction's reference (default: a new one)")
	c.Flags().BoolVar(&yes, "yes", false, "post without asking")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show the entry and post nothing")
	_ = c.MarkFlagRequired("asset")
	c.MarkFlagsMutuallyExclusive("yes", "dry-run")
	return c
}

// adminTransferCmd is `svc admin ledger transfer`.
func adminTransferCmd() *cobra.Command {
	var (
		from, to, amountS, feeS, ref, memo, key string
		yes, dryRun                             bool
	)
	c := &cobra.Command{
		Use:   "transfer --from BTC --to BTC_LN --amount UNITS [--network-fee UNITS] --ref TXID --memo TEXT --key FILE [--yes | --dry-run]",
		Short: "Book money moved between two custodies of the same coin (a Lightning channel opened from the on-chain wallet, or closed back to it)",
		Long: `Books a move between the BTC and BTC_LN custodies as two correction entries posted together, one per
asset, with one audit record (ledger.transfer):

  in --from:  custody credited AMOUNT + NETWORK_FEE (it leaves the wallet), network_fees debited
              NETWORK_FEE, transfer debited AMOUNT
  in --to:    custody debited AMOUNT (it arrives), transfer credited AMOUNT

Each asset's entry balances; each custody then follows its wallet, and the two transfer accounts sum
to zero. A channel opened from the on-chain wallet: --from BTC --to BTC_LN, --amount the channel's
local balance, --network-fee the funding transaction's fee, --ref its txid. A channel closed to the
wallet: --from BTC_LN --to BTC, --amount what reached the wallet, --network-fee the closing fee.
Amounts are integers in sat. The sending custody may not go below zero. The entries are shown with
every balance before and after, then the command asks (--yes posts without asking, --dry-run stops
and needs no key); booking the same --ref again changes nothing. The booking is signed with an
enrolled admin's key (--key, default $SVC_OPERATOR_KEY): the statement names from, to, the amount,
the network fee, the reference and the memo; the audit trail records op:NAME.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bookingChecks(key, memo, "say what moved", dryRun); err != nil {
				return err
			}
			amount, err := money.ParseUnits(amountS, true)
			if err != nil {
				return fmt.Errorf("--amount %q: %w (sat)", amountS, err)
			}
			var fee int64
			if feeS != "" {
				if fee, err = money.ParseUnits(feeS, false); err != nil {
					return fmt.Errorf("--network-fee %q: %w (sat)", feeS, err)
				}
			}
			t := ledger.CustodyTransfer{From: from, To: to, Amount: amount, NetworkFee: fee, Reference: ref, Memo: memo}
			return runBooking(cmd, booking[ledger.CustodyTransfer]{what: "transfer", codes: []string{from, to}, p: t,
				preview: ledger.PreviewTransfer,
				expect: func(t ledger.CustodyTransfer, d map[string]int) operator.Expect {
					return ledger.TransferExpect(t, d[t.From], d[t.To])
				},
				book: func(ctx context.Context, idb bun.IDB, ops *operator.Service, now time.Time, t ledger.CustodyTransfer, env *operator.Envelope) (ledger.Booked, error) {
					t.Signature = env
					return ledger.BookTransfer(ctx, idb, ops, now, t, nil)
				}}, key, yes, dryRun)
		},
	}
	c.Flags().StringVar(&from, "from", "", "the asset whose custody sent (BTC for a channel open)")
	c.Flags().StringVar(&to, "to", "", "the asset whose custody received (BTC_LN for a channel open)")
	c.Flags().StringVar(&amountS, "amount", "", "what arrived in --to's custody, in sat")
	c.Flags().StringVar(&feeS, "network-fee", "", "the transaction's fee paid out of --from's custody, in sat (default 0)")
	c.Flags().StringVar(&ref, "ref", "", "the funding or closing transaction id (required)")
	c.Flags().StringVar(&memo, "memo", "", "what moved (required)")
	keyFlag(c, &key)
	c.Flags().BoolVar(&yes, "yes", false, "post without asking")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show the entries and post nothing")
	for _, f := range []string{"from", "to", "amount", "ref"} {
		_ = c.MarkFlagRequired(f)
	}
	c.MarkFlagsMutuallyExclusive("yes", "dry-run")
	return c
}
