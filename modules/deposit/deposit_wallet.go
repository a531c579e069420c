package deposit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/btcpay"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// WalletAlert is one row of wallet_alerts: a BTC wallet receive that
// matches no deposit payment.
type WalletAlert struct {
	bun.BaseModel `bun:"table:wallet_alerts"`

	ID            int64     `bun:"id,pk,autoincrement"`
	Asset         string    `bun:"asset"`
	Txid          string    `bun:"txid"`
	Amount        int64     `bun:"amount"`
	Confirmations *int64    `bun:"confirmations"`
	DetectedAt    time.Time `bun:"detected_at"`
	Note          *string   `bun:"note"`
}

// WalletAlertView is the API's Wallet alert.
type WalletAlertView struct {
	ID            int64   `json:"id"`
	Asset         string  `json:"asset"`
	Txid          string  `json:"txid"`
	Amount        string  `json:"amount"`
	Confirmations *int64  `json:"confirmations"`
	DetectedAt    string  `json:"detected_at"`
	Note          *string `json:"note"`
}

// ToView renders an alert (BTC amounts, 8 decimals).
func (w WalletAlert) ToView(decimals int) WalletAlertView {
	return WalletAlertView{ID: w.ID, Asset: w.Asset, Txid: w.Txid, Amount: money.Format(w.Amount, decimals),
		Confirmations: w.Confirmations, DetectedAt: timefmt.Format(w.DetectedAt), Note: w.Note}
}

// Wallet scan settings.
const (
	walletPage     = 200
	walletMaxPages = 50 // the newest 10,000 wallet transactions per scan
)

// ScanWallet lists the BTC wallet's receives and records, once each, those
// that match no deposit payment. A receive the processor labelled with one
// of our deposits' invoices first gets that deposit reconciled, so a
// payment the service has not seen yet is recorded rather than alerted.
// It returns how many new alerts it recorded.
func (s *Service) ScanWallet(ctx context.Context) (int, error) {
	if s.Processor == nil {
		return 0, nil
	}
	btc, err := s.assets().Get(ctx, asset.BTC)
	if err != nil {
		return 0, err
	}
	reconciled := map[string]bool{}
	added := 0
	for page := 0; page < walletMaxPages; page++ {
		txs, err := s.Processor.WalletTransactions(ctx, btcpay.WalletTransactionsParams{Skip: page * walletPage, Limit: walletPage})
		if err != nil {
			return added, fmt.Errorf("wallet scan: %w", err)
		}
		for _, tx := range txs {
			if !tx.Amount.Decimal().IsPos() || tx.TransactionHash == "" {
				continue // a send, or nothing
			}
			n, err := s.checkReceive(ctx, btc, tx, reconciled)
			if err != nil {
				return added, err
			}
			added += n
		}
		if len(txs) < walletPage {
			break
		}
	}
	return added, nil
}

func (s *Service) checkReceive(ctx context.Context, btc asset.Asset, tx btcpay.WalletTransaction, reconciled map[string]bool) (int, error) {
	st, err := s.receiveState(ctx, btc.Code, tx.TransactionHash)
	if err != nil || st.alerted {
		return 0, err
	}
	if st.payments > 0 {
		return s.checkReceiveAmount(ctx, btc, tx, st)
	}
	var note *string
	if inv := invoiceLabel(tx.Labels); inv != "" {
		d, ok, err := depositByInvoice(ctx, s.DB, inv)
		if err != nil {
			return 0, err
		}
		if ok && !reconciled[inv] {
			reconciled[inv] = true
			if err := s.Reconcile(ctx, d.ID); err != nil {
				return 0, fmt.Errorf("wallet scan: reconcile deposit %s: %w", d.ID, err)
			}
			if st, err = s.receiveState(ctx, btc.Code, tx.TransactionHash); err != nil || st.payments > 0 {
				return 0, err
			}
		}
		msg := fmt.Sprintf("the processor labels it with invoice %s, but no deposit payment matches it", inv)
		if ok {
			msg = fmt.Sprintf("the processor labels it with invoice %s of deposit %s, but records no payment for it (a payment after monitoring ended?)", inv, d.ID)
		}
		note = &msg
	}
	units, err := tx.Amount.Units(btc.Decimals)
	if err != nil {
		s.log().ErrorContext(ctx, "deposit: wallet receive with an amount that does not convert", "txid", tx.TransactionHash, "amount", tx.Amount.String())
		return 0, nil
	}
	a := WalletAlert{Asset: btc.Code, Txid: tx.TransactionHash, Amount: units, DetectedAt: s.now(), Note: note}
	if tx.Confirmations.Valid && tx.Confirmations.V >= 0 {
		c := tx.Confirmations.V
		a.Confirmations = &c
	}
	return s.recordAlert(ctx, a, "deposit: wallet receive matches no deposit payment", "amount", money.Format(units, btc.Decimals))
}

// checkReceiveAmount compares a confirmed receive that pays deposit
// payments with what they account for: one transaction can pay a tracked
// deposit and another of the service's addresses, and matching by txid
// alone would hide the second output. The rest is recorded as a wallet
// alert (once per transaction). Before its first confirmation the poller
// may not have recorded every payment of the transaction yet, so it waits.
// A store that charges payers a network fee makes payments worth less than
// what arrived (the fee stays in the wallet): such a difference shows here
// too, for an operator to recognise.
func (s *Service) checkReceiveAmount(ctx context.Context, btc asset.Asset, tx btcpay.WalletTransaction, st receive) (int, error) {
	if !tx.Confirmations.Valid || tx.Confirmations.V < 1 {
		return 0, nil
	}
	units, err := tx.Amount.Units(btc.Decimals)
	if err != nil || units <= st.paid || st.inexact > 0 {
		return 0, nil // a payment without an exact amount is in review: an operator sees it there
	}
	note := fmt.Sprintf("transaction %s brought %s BTC to the wallet, but its deposit payments account for %s BTC: %s BTC arrived on no tracked deposit (another of the service's addresses, or a network fee the store charged the payer)",
		tx.TransactionHash, money.Format(units, btc.Decimals), money.Format(st.paid, btc.Decimals), money.Format(units-st.paid, btc.Decimals))
	c := tx.Confirmations.V
	a := WalletAlert{Asset: btc.Code, Txid: tx.TransactionHash, Amount: units - st.paid, Confirmations: &c, DetectedAt: s.now(), Note: &note}
	return s.recordAlert(ctx, a, "deposit: wallet receive worth more than its deposit payments",
		"amount", money.Format(units, btc.Decimals), "payments", money.Format(st.paid, btc.Decimals))
}

// recordAlert stores a wallet alert once per transaction and logs it when
// it is new; it returns how many it stored (0 or 1).
func (s *Service) recordAlert(ctx context.Context, a WalletAlert, msg string, attrs ...any) (int, error) {
	res, err := s.DB.NewInsert().Model(&a).On("CONFLICT (asset, txid) DO NOTHING").Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("record wallet alert %s: %w", a.Txid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, nil
	}
	s.log().ErrorContext(ctx, msg, append([]any{"txid", a.Txid}, attrs...)...)
	return 1, nil
}

// receive is what the service knows of a wallet receive: its deposit
// payments (how many, what they credit, how many have no exact amount)
// and whether it is an alert already.
type receive struct {
	payments, inexact int
	paid              int64
	alerted           bool
}

// receiveState reads it in one statement.
func (s *Service) receiveState(ctx context.Context, code, txid string) (receive, error) {
	var st receive
	err := s.DB.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE units IS NULL), coalesce(sum(units), 0),
       EXISTS (SELECT 1 FROM wallet_alerts WHERE asset = ? AND txid = ?)
  FROM deposit_payments WHERE txid = ?`, code, txid, txid).Scan(&st.payments, &st.inexact, &st.paid, &st.alerted)
	if err != nil {
		return receive{}, fmt.Errorf("wallet scan: what is known of %s: %w", txid, err)
	}
	return st, nil
}

// invoiceLabel reads the invoice id from BTCPay's (deprecated) labels
// dictionary: {"invoice": {"type": "invoice", "ref": "<id>", ...}}.
func invoiceLabel(raw json.RawMessage) string {
	var labels map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &labels) != nil {
		return ""
	}
	var l struct {
		Ref string `json:"ref"`
	}
	if json.Unmarshal(labels["invoice"], &l) != nil {
		return ""
	}
	return l.Ref
}

// WalletAlerts returns the newest alerts first.
func (s *Service) WalletAlerts(ctx context.Context, limit int) ([]WalletAlertView, error) {
	return walletAlerts(ctx, s.DB, limit)
}

func walletAlerts(ctx context.Context, idb bun.IDB, limit int) ([]WalletAlertView, error) {
	if limit <= 0 {
		limit = DefaultReviewLimit
	}
	var rows []WalletAlert
	if err := idb.NewSelect().Model(&rows).OrderExpr("id DESC").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("list wallet alerts: %w", err)
	}
	dec, err := decimalsOf(ctx, idb)
	if err != nil {
		return nil, err
	}
	out := make([]WalletAlertView, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.ToView(dec[r.Asset]))
	}
	return out, nil
}
