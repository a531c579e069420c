package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/chain"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/tron"
)

// TronNode reads TRON transactions and blocks (*tron.Client).
type TronNode interface {
	Transaction(ctx context.Context, txid string) (*tron.Transaction, error)
	SolidBlock(ctx context.Context) (tron.Block, error)
	USDTContract() chain.TronAddress
}

// Alerter raises operator alerts (*alert.Service).
type Alerter interface {
	Raise(ctx context.Context, idb bun.IDB, p alert.Params) (alert.Alert, bool, error)
}

// Txid length limits (SPEC Limits).
const (
	MinTxid = 16
	MaxTxid = 128
)

// USDTConfirmEvery is how often broadcast USDT_TRC20 withdrawals are
// checked for a solidified block.
const USDTConfirmEvery = time.Minute

// Errors of mark-broadcast.
var (
	ErrNoTronNode  = fault.New(fault.Unavailable, "the TRON node is not configured (TRONGRID_URL): USDT_TRC20 transfers cannot be verified")
	ErrNoHotWallet = fault.New(fault.Unavailable,
		"TRON_HOT_WALLET is not configured: the sender of a USDT_TRC20 transfer cannot be verified")
	ErrTronUnavailable = fault.New(fault.Unavailable,
		"the TRON node is unreachable or its answer was unusable; retry with the same Idempotency-Key")
)

// mismatch is the 422 of a transfer that does not pay the withdrawal.
func mismatch(field, format string, args ...any) error {
	return fault.New(fault.Invalid, "mark-broadcast refused: "+field+": "+fmt.Sprintf(format, args...))
}

// MarkBroadcast records that the operator sent an approved USDT_TRC20
// withdrawal off-service in transaction p.Txid (trimmed: the txid the
// operator signs). An unsigned report is refused first when signatures
// are required, before the node is asked. The transaction is read
// from the TRON node (before any database transaction) and checked against
// the withdrawal, never against anything else in the request: the
// configured USDT contract, the sender (the hot wallet), a successful
// receipt, and exactly one Transfer event of the net amount from the hot
// wallet to the destination. Then, in one transaction with the row
// locked: broadcast, the txid, the ledger's payout_broadcast (the net from
// custody to in-flight), withdrawal.broadcast, the audit row and the key's
// answer. The worker confirms it once its block is solidified
// (ConfirmUSDT).
func (s *Service) MarkBroadcast(ctx context.Context, p DecideParams, rec Completer) (AdminView, []byte, error) {
	txid := strings.TrimSpace(p.Txid)
	p.Txid = txid
	if n := utf8.RuneCountInString(txid); n < MinTxid || n > MaxTxid || !storable(txid) {
		return AdminView{}, nil, fault.New(fault.Invalid, fmt.Sprintf("txid must have %d to %d characters", MinTxid, MaxTxid))
	}
	if err := s.refuseUnsigned(p); err != nil {
		return AdminView{}, nil, err
	}
	w, err := s.Get(ctx, p.WithdrawalID)
	if err != nil {
		return AdminView{}, nil, err
	}
	if w.Asset != asset.USDTTRC20 {
		return AdminView{}, nil, fault.Wrap(fault.Conflict, fmt.Sprintf(
			"withdrawal %s is %s, which the service pays itself: only USDT_TRC20 withdrawals are sent off-service", w.ID, w.Asset), ErrIllegalTransition)
	}
	if _, err := Next(w.Status, MarkBroadcast); err != nil {
		return AdminView{}, nil, err
	}
	if s.Tron == nil {
		return AdminView{}, nil, ErrNoTronNode
	}
	if s.Config.HotWallet == "" {
		return AdminView{}, nil, ErrNoHotWallet
	}
	tx, err := s.Tron.Transaction(ctx, txid)
	switch {
	case errors.Is(err, tron.ErrNotFound):
		return AdminView{}, nil, mismatch("txid", "transaction %s is not known to the TRON node; report it once it is broadcast", txid)
	case errors.Is(err, tron.ErrRefused):
		return AdminView{}, nil, mismatch("txid", "%q is not a TRON transaction id", txid)
	case err != nil:
		return AdminView{}, nil, fault.Wrap(fault.Unavailable, ErrTronUnavailable.Message, err)
	}
	if err := s.verifyTransfer(w, tx); err != nil {
		return AdminView{}, nil, err
	}
	var out AdminView
	body, err := s.decideTx(ctx, p, audit.WithdrawalMarkBroadcast, map[string]any{"txid": tx.ID}, rec,
		func(ctx context.Context, tx2 bun.Tx, cur *Withdrawal, a asset.Asset, _ audit.Actor) (any, error) {
			if _, err := Next(cur.Status, MarkBroadcast); err != nil {
				return nil, err
			}
			if err := refuseHalted(a, "mark-broadcast"); err != nil {
				return nil, err
			}
			if cur.AmountNet == nil || *cur.AmountNet != *w.AmountNet || cur.Destination != w.Destination {
				return nil, fault.New(fault.Conflict, "the withdrawal changed while its transfer was checked; retry")
			}
			var other uuid.UUID
			err := tx2.NewSelect().Model((*Withdrawal)(nil)).Column("id").
				Where("asset = ? AND txid = ?", cur.Asset, tx.ID).Scan(ctx, &other)
			switch {
			case err == nil:
				return nil, mismatch("txid", "transaction %s was already reported for withdrawal %s", tx.ID, other)
			case !db.IsNoRows(err):
				return nil, err
			}
			if _, err := ledger.RecordPayoutBroadcast(ctx, tx2, cur.Asset, *cur.AmountNet, cur.ID.String(),
				"USDT_TRC20 transfer "+tx.ID); err != nil {
				return nil, err
			}
			if err := s.transit(ctx, tx2, cur, MarkBroadcast, map[string]any{"txid": tx.ID}); err != nil {
				return nil, err
			}
			if err := s.emitPayout(ctx, tx2, event.WithdrawalBroadcast, *cur, a); err != nil {
				return nil, err
			}
			out, err = s.adminViewTx(ctx, tx2, *cur, a)
			return out, err
		})
	if err != nil {
		if db.IsUniqueViolation(err, "withdrawals_txid") {
			return AdminView{}, nil, mismatch("txid", "transaction %s was already reported for another withdrawal", tx.ID)
		}
		return AdminView{}, nil, err
	}
	return out, body, nil
}

// verifyTransfer checks that tx pays w exactly; the refusal names the
// field and both values.
func (s *Service) verifyTransfer(w Withdrawal, tx *tron.Transaction) error {
	usdt := s.Tron.USDTContract()
	hot, err := chain.ParseTronAddress(s.Config.HotWallet)
	if err != nil {
		return fmt.Errorf("TRON_HOT_WALLET: %w", err)
	}
	dest, err := chain.ParseTronAddress(w.Destination)
	if err != nil {
		return fmt.Errorf("withdrawal %s destination: %w", w.ID, err)
	}
	if w.AmountNet == nil {
		return fmt.Errorf("withdrawal %s is approved without a net amount", w.ID)
	}
	net := *w.AmountNet
	switch {
	case tx.Pending:
		return mismatch("receipt", "transaction %s is not in a block yet; report it once it is", tx.ID)
	case tx.ContractType != "TriggerSmartContract" || tx.Contract != usdt:
		return mismatch("contract", "the transaction calls %s (%s), not the USDT contract %s", tx.Contract, tx.ContractType, usdt)
	case tx.Owner != hot:
		return mismatch("sender", "the transaction was signed by %s, not the hot wallet %s", tx.Owner, hot)
	case !tx.Succeeded():
		return mismatch("receipt", "the transaction did not succeed (result %q %s)", tx.Result, tx.ResMessage)
	}
	transfers := tx.TransfersOf(usdt)
	if len(transfers) != 1 {
		return mismatch("transfer", "the transaction emitted %d USDT Transfer events, not exactly one", len(transfers))
	}
	t := transfers[0]
	switch {
	case t.From != hot:
		return mismatch("sender", "the Transfer is from %s, not the hot wallet %s", t.From, hot)
	case t.To != dest:
		return mismatch("recipient", "the Transfer is to %s, not the destination %s", t.To, dest)
	case t.Amount != net:
		return mismatch("amount", "the Transfer moved %s USDT_TRC20, not the net %s", fmtUnits(t.Amount), fmtUnits(net))
	}
	return nil
}

func fmtUnits(units int64) string { return asset.Asset{Decimals: 6}.Format(units) }

// emitPayout writes withdrawal.broadcast, withdrawal.completed or
// withdrawal.failed for w.
func (s *Service) emitPayout(ctx context.Context, tx bun.Tx, typ event.Type, w Withdrawal, a asset.Asset) error {
	return s.emitPayouts(ctx, tx, a, payoutEvent{typ, w})
}

// payoutEvent is an event of a withdrawal's payout: its type and the
// withdrawal as the event tells it.
type payoutEvent struct {
	typ event.Type
	w   Withdrawal
}

// emitPayouts emits the payout events es of one state change, in one
// statement (Emitter.EmitAll) when there are several.
func (s *Service) emitPayouts(ctx context.Context, tx bun.Tx, a asset.Asset, es ...payoutEvent) error {
	if s.Events == nil {
		return nil
	}
	ems := make([]event.Emission, len(es))
	for i, e := range es {
		data, err := payoutData(e.typ, e.w, a)
		if err != nil {
			return err
		}
		ems[i] = event.Emission{Type: e.typ, Data: data}
	}
	var err error
	if len(ems) == 1 {
		_, err = s.Events.Emit(ctx, tx, ems[0].Type, ems[0].Data)
	} else {
		_, err = s.Events.EmitAll(ctx, tx, ems...)
	}
	if err != nil {
		return fmt.Errorf("withdrawal %s: emit %s: %w", es[0].w.ID, es[0].typ, err)
	}
	return nil
}

// payoutData is the data of a payout event of type typ about w.
func payoutData(typ event.Type, w Withdrawal, a asset.Asset) (any, error) {
	fee, net := a.Format(derefInt(w.Fee)), a.Format(derefInt(w.AmountNet))
	switch typ {
	case event.WithdrawalBroadcast:
		return event.WithdrawalBroadcastData{WithdrawalID: w.ID.String(), ExternalUserID: optional(w.ExternalUserID), PlatformAccount: optional(w.PlatformAccount), Asset: w.Asset,
			Status: string(w.Status), AmountGross: a.Format(w.AmountGross), Fee: fee, AmountNet: net, Txid: derefStr(w.Txid),
			Metadata: w.Metadata, ClientReference: w.ClientReference}, nil
	case event.WithdrawalCompleted:
		d := event.WithdrawalCompletedData{WithdrawalID: w.ID.String(), ExternalUserID: optional(w.ExternalUserID), PlatformAccount: optional(w.PlatformAccount), Asset: w.Asset,
			Status: string(w.Status), AmountGross: a.Format(w.AmountGross), Fee: fee, AmountNet: net, Txid: w.Txid,
			Metadata: w.Metadata, ClientReference: w.ClientReference}
		if w.Asset == asset.BTCLN {
			d.Txid = nil // no transaction: the published schema's null for Lightning
		}
		return d, nil
	case event.WithdrawalFailed:
		d := event.WithdrawalFailedData{WithdrawalID: w.ID.String(), ExternalUserID: optional(w.ExternalUserID), PlatformAccount: optional(w.PlatformAccount), Asset: w.Asset,
			Status: string(w.Status), AmountGross: a.Format(w.AmountGross), Txid: w.Txid, FailureReason: derefStr(w.FailureReason),
			Metadata: w.Metadata, ClientReference: w.ClientReference}
		if w.Fee != nil && w.AmountNet != nil {
			d.Fee, d.AmountNet = &fee, &net
		}
		return d, nil
	}
	return nil, fmt.Errorf("withdrawal: no payout event %s", typ)
}

func derefInt(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

func derefStr(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

// USDT transfers a node does not show: the alert waits for
// USDTMissingChecks consecutive misses spread over USDTMissingFor at
// least (a lagging node, or a balancer that asked another one, misses a
// transfer for a while).
const (
	USDTMissingChecks = 3
	USDTMissingFor    = 10 * time.Minute
)

// ConfirmUSDT settles every broadcast USDT_TRC20 withdrawal whose transfer
// is in a solidified block: confirmed, the hold spent (payout_settle: the
// gross leaves the hold, the service fee becomes fee income, the net
// leaves in-flight), withdrawal.completed. A transfer the node does not
// show as successful is counted (transfer_missing_since, _checks); once
// the node has missed it on USDTMissingChecks consecutive checks spread
// over USDTMissingFor, one operator alert is raised and the withdrawal
// stays broadcast: only an operator, who can see the chain, decides
// (release with an attestation). A check that finds the transfer clears
// the count. The same pass reads the transfers of released USDT_TRC20
// withdrawals while they are watched (watchReleasedUSDT). It returns how
// many it confirmed.
func (s *Service) ConfirmUSDT(ctx context.Context) (int, error) {
	if s.Tron == nil {
		return 0, nil
	}
	var open []Withdrawal
	if err := s.DB.NewSelect().Model(&open).Where("status = ? AND asset = ?", StatusBroadcast, asset.USDTTRC20).
		OrderExpr("created_at, id").Limit(500).Scan(ctx); err != nil {
		return 0, fmt.Errorf("list broadcast USDT withdrawals: %w", err)
	}
	watched, err := s.watchedReleases(ctx, []string{asset.USDTTRC20}, &s.usdtWatchAfter)
	if err != nil {
		return 0, err
	}
	if len(open) == 0 && len(watched) == 0 {
		return 0, nil
	}
	solid, err := s.Tron.SolidBlock(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the solidified TRON block: %w", err)
	}
	confirmed := 0
	for _, w := range open {
		tx, err := s.Tron.Transaction(ctx, derefStr(w.Txid))
		switch {
		case errors.Is(err, tron.ErrNotFound) || (err == nil && !tx.Pending && !tx.Succeeded()):
			s.transferMissed(ctx, w, err)
			continue
		case err != nil:
			s.log().WarnContext(ctx, "withdrawal: read USDT transfer", "withdrawal_id", w.ID, "error", err)
			continue
		}
		s.transferSeen(ctx, w)
		if tx.Pending || tx.BlockNumber > solid.Number {
			continue // not final yet
		}
		ok, err := s.settle(ctx, w.ID, "USDT_TRC20 transfer "+tx.ID+" solidified")
		if err != nil {
			return confirmed, err
		}
		if ok {
			confirmed++
		}
	}
	for _, w := range watched {
		tx, err := s.Tron.Transaction(ctx, derefStr(w.Txid))
		switch {
		case errors.Is(err, tron.ErrNotFound):
			continue
		case err != nil:
			s.log().WarnContext(ctx, "withdrawal: read the transfer of a released USDT withdrawal", "withdrawal_id", w.ID, "error", err)
			continue
		case tx.Pending || !tx.Succeeded() || tx.BlockNumber > solid.Number:
			continue // not a final successful transfer (yet)
		}
		s.paidAfterRefund(ctx, w, fmt.Sprintf("USDT_TRC20 withdrawal %s was released (its hold returned to the user) but its transfer %s is now in a solidified block: "+
			"the user was paid and refunded; correct the books (svc admin ledger) and recover the money", w.ID, tx.ID))
	}
	return confirmed, nil
}

// transferMissed counts one more check on which the node did not show
// w's transfer, and raises the alert once the misses are enough.
func (s *Service) transferMissed(ctx context.Context, w Withdrawal, cause error) {
	now := s.now()
	var cur Withdrawal
	err := s.DB.NewUpdate().Model(&cur).
		Set("transfer_missing_since = coalesce(transfer_missing_since, ?)", now).
		Set("transfer_missing_checks = transfer_missing_checks + 1").
		Where("id = ? AND status = ?", w.ID, StatusBroadcast).
		Returning("transfer_missing_since, transfer_missing_checks").Scan(ctx)
	if err != nil {
		if !db.IsNoRows(err) {
			s.log().ErrorContext(ctx, "withdrawal: count a missed USDT transfer", "withdrawal_id", w.ID, "error", err)
		}
		return
	}
	if cur.TransferMissingChecks < USDTMissingChecks || cur.TransferMissingSince == nil || now.Sub(*cur.TransferMissingSince) < USDTMissingFor {
		s.log().WarnContext(ctx, "withdrawal: the TRON node does not show a reported USDT transfer", "withdrawal_id", w.ID,
			"txid", derefStr(w.Txid), "checks", cur.TransferMissingChecks, "since", cur.TransferMissingSince, "error", cause)
		return
	}
	s.alertMissing(ctx, w, cur.TransferMissingChecks, *cur.TransferMissingSince, cause)
}

// transferSeen clears w's count of missed checks: the node shows its
// transfer.
func (s *Service) transferSeen(ctx context.Context, w Withdrawal) {
	if w.TransferMissingChecks == 0 {
		return
	}
	if _, err := s.DB.NewUpdate().Model((*Withdrawal)(nil)).
		Set("transfer_missing_since = NULL, transfer_missing_checks = 0").
		Where("id = ? AND status = ?", w.ID, StatusBroadcast).Exec(ctx); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: clear the missed checks of a USDT transfer", "withdrawal_id", w.ID, "error", err)
	}
}

// settle moves a broadcast withdrawal to confirmed and spends its hold, in
// one transaction; false when it was no longer broadcast.
func (s *Service) settle(ctx context.Context, id uuid.UUID, memo string) (bool, error) {
	done := false
	err := s.payoutTx(ctx, id, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		done = false
		if w.Status != StatusBroadcast {
			return nil
		}
		done = true
		return s.settleTx(ctx, tx, w, a, memo)
	})
	return done, err
}

// settleTx confirms the broadcast withdrawal w: its hold is spent
// (ledger.SettlePayout with the network fee its broadcast recorded) and
// withdrawal.completed is emitted.
func (s *Service) settleTx(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, memo string) error {
	if w.Fee == nil || w.AmountNet == nil {
		return fmt.Errorf("withdrawal %s is broadcast without a fixed fee and net", w.ID)
	}
	if _, err := ledger.SettlePayout(ctx, tx, w.settlement(memo)); err != nil {
		return err
	}
	if err := s.transit(ctx, tx, w, Confirm, nil); err != nil {
		return err
	}
	return s.emitPayout(ctx, tx, event.WithdrawalCompleted, *w, a)
}

// settlement is the ledger's settlement of w's hold, with memo (w's fee
// and net fixed).
func (w Withdrawal) settlement(memo string) ledger.Settlement {
	return ledger.Settlement{Asset: w.Asset, ExternalUserID: w.holder().ID, Platform: w.holder().Platform,
		SourceRef: w.ID.String(), Mode: ledger.FeeMode(w.FeeMode), Gross: w.AmountGross, Net: derefInt(w.AmountNet),
		ServiceFee: derefInt(w.Fee), NetworkFee: derefInt(w.NetworkFee), Memo: memo}
}

// alertMissing raises, once per withdrawal, the alert that its reported
// transfer is no longer a successful transaction on the node.
func (s *Service) alertMissing(ctx context.Context, w Withdrawal, checks int, since time.Time, cause error) {
	if s.Alerts == nil {
		return
	}
	detail := fmt.Sprintf("USDT_TRC20 withdrawal %s was marked broadcast with transaction %s, which the TRON node has not shown as a successful transfer "+
		"on %d consecutive checks since %s", w.ID, derefStr(w.Txid), checks, since.UTC().Format(time.RFC3339))
	if cause != nil {
		detail += " (" + cause.Error() + ")"
	}
	detail += ". The service keeps it broadcast and held, and keeps reading the transfer: it confirms it if the transfer solidifies after all. " +
		"Check the chain (another node or explorer); if the transfer did not and cannot happen, release it with an attestation. " +
		fmt.Sprintf("After a release the service still reads the transaction for %d days and raises withdrawal.paid_after_refund if it confirms.",
			int(RefundWatch/(24*time.Hour)))
	if _, _, err := s.Alerts.Raise(ctx, s.DB, alert.Params{Type: AlertUSDTTransferMissing, Subject: w.ID.String(), Detail: detail}); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: raise alert", "withdrawal_id", w.ID, "error", err)
	}
}
