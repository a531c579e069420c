package btcpaysim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

type walletTx struct {
	hash          string
	amount        decimal.Decimal // net change of the wallet: positive received, negative sent
	confirmations int64
	height        int64 // 0 while unconfirmed
	ts            time.Time
	invoiceID     string
	payouts       []string // the payouts it pays, the first its label
	unlinked      bool     // the object graph links none of them (UnlinkTransaction)
	replaced      bool     // a conflicting transaction was mined instead (ReplaceTransaction)
	address       string
}

// wallet is the store's on-chain wallet and Lightning node.
type wallet struct {
	txs             []*walletTx
	byHash          map[string]*walletTx // the first of txs with each hash
	baseConfirmed   decimal.Decimal      // balance not explained by txs (SetWalletBalance)
	baseUnconfirmed decimal.Decimal
	height          int64
	lnLocalMsat     int64
	lnRemoteMsat    int64
	// lnRoutingFeeMsat is what each completed Lightning payout pays the
	// route besides its amount (SetLightningRoutingFee).
	lnRoutingFeeMsat int64
}

func newWallet() wallet {
	return wallet{height: 200, lnLocalMsat: 0, lnRemoteMsat: 50_000_000_000}
}

func (w *wallet) find(hash string) *walletTx { return w.byHash[hash] }

// add appends t to the wallet's transactions.
func (w *wallet) add(t *walletTx) {
	w.txs = append(w.txs, t)
	if w.byHash == nil {
		w.byHash = map[string]*walletTx{}
	}
	if w.byHash[t.hash] == nil {
		w.byHash[t.hash] = t
	}
}

func (w *wallet) receive(hash string, amt decimal.Decimal, confs int64, at time.Time, invoiceID string) {
	t := &walletTx{hash: hash, amount: amt, ts: at, invoiceID: invoiceID}
	w.add(t)
	if confs > 0 {
		w.confirm(hash, confs)
	}
}

// confirm mines blocks until the tx has confs confirmations. A replaced
// transaction confirms after all when a reorganisation drops its
// conflict.
func (w *wallet) confirm(hash string, confs int64) {
	t := w.find(hash)
	if t == nil || t.confirmations >= confs {
		return
	}
	t.replaced = false
	if t.height == 0 {
		w.height++
		t.height = w.height
	}
	if need := t.height + confs - 1; need > w.height {
		w.height = need
	}
	t.confirmations = w.height - t.height + 1
}

func (w *wallet) drop(hash string) {
	w.txs = slices.DeleteFunc(w.txs, func(t *walletTx) bool { return t.hash == hash })
	delete(w.byHash, hash)
}

// unpay takes payout po out of the transaction that pays it: the whole
// transaction is dropped when it pays no other payout, otherwise only
// po's output leaves the batch.
func (w *wallet) unpay(po *payout) {
	t := w.find(po.txid)
	if t == nil || len(t.payouts) < 2 || !slices.Contains(t.payouts, po.id) {
		w.drop(po.txid)
		return
	}
	t.amount, _ = t.amount.Add(po.amount)
	t.payouts = slices.DeleteFunc(t.payouts, func(id string) bool { return id == po.id })
}

func (w *wallet) balances() (confirmed, unconfirmed decimal.Decimal) {
	confirmed, unconfirmed = w.baseConfirmed, w.baseUnconfirmed
	for _, t := range w.txs {
		if t.replaced {
			continue // it spends nothing: its conflict did
		}
		if t.confirmations > 0 {
			confirmed, _ = confirmed.Add(t.amount)
		} else {
			unconfirmed, _ = unconfirmed.Add(t.amount)
		}
	}
	return confirmed, unconfirmed
}

// SetWalletBalance sets the on-chain wallet's confirmed and unconfirmed
// balances (BTC decimal strings), keeping its transactions.
func (s *Sim) SetWalletBalance(confirmed, unconfirmed string) error {
	c, err := decimal.Parse(confirmed)
	if err != nil {
		return fmt.Errorf("btcpaysim: confirmed balance: %w", err)
	}
	u, err := decimal.Parse(unconfirmed)
	if err != nil {
		return fmt.Errorf("btcpaysim: unconfirmed balance: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wallet.baseConfirmed, s.wallet.baseUnconfirmed = decimal.Zero, decimal.Zero
	tc, tu := s.wallet.balances()
	s.wallet.baseConfirmed, _ = c.Sub(tc)
	s.wallet.baseUnconfirmed, _ = u.Sub(tu)
	return nil
}

// WalletBalance returns the on-chain wallet's confirmed and unconfirmed
// balances in BTC.
func (s *Sim) WalletBalance() (confirmed, unconfirmed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, u := s.wallet.balances()
	return fmtDec(c, 8), fmtDec(u, 8)
}

// SetLightningBalance sets what the Lightning node can spend, in msat.
func (s *Sim) SetLightningBalance(localMsat int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wallet.lnLocalMsat = localMsat
}

// SetLightningRoutingFee makes every Lightning payout completed from now on
// pay msat to its route besides its amount, out of the local balance, as a
// routed payment does (BTCPay does not report it).
func (s *Sim) SetLightningRoutingFee(msat int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wallet.lnRoutingFeeMsat = msat
}

// OpenChannel opens a Lightning channel from the on-chain wallet: the
// confirmed balance pays localSat (the channel's local balance) and feeSat
// (the funding transaction's fee), and the node's local balance grows by
// localSat.
func (s *Sim) OpenChannel(localSat, feeSat int64) error {
	spent, err := decimal.New(localSat+feeSat, 8)
	if err != nil {
		return fmt.Errorf("btcpaysim: open channel: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wallet.baseConfirmed, err = s.wallet.baseConfirmed.Sub(spent); err != nil {
		return fmt.Errorf("btcpaysim: open channel: %w", err)
	}
	s.wallet.lnLocalMsat += localSat * 1000
	return nil
}

// SetFeeRate sets the wallet's fee-rate estimate in sat/vB ("4.107").
func (s *Sim) SetFeeRate(rate string) error {
	d, err := decimal.Parse(rate)
	if err != nil || d.IsNeg() {
		return fmt.Errorf("btcpaysim: fee rate %q is not a non-negative decimal", rate)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feeRate = d
	return nil
}

// ReceiveUnmatched puts a BTC receive that matches no invoice in the wallet
// (amount in BTC) and returns its txid and address.
func (s *Sim) ReceiveUnmatched(amount string, confirmations int64) (txid, address string, err error) {
	d, err := decimal.Parse(amount)
	if err != nil || !d.IsPos() || d.Trim(0).Scale() > 8 {
		return "", "", fmt.Errorf("btcpaysim: amount %q is not a positive BTC amount", amount)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	txid, address = randHex(32), newAddress(s.net)
	s.wallet.receive(txid, d, confirmations, s.now(), "")
	s.wallet.find(txid).address = address
	return txid, address, nil
}

// AddOutput adds an output of amount (BTC) to wallet transaction txid, to
// another of the store's addresses: one transaction paying a tracked
// deposit and an address nothing tracks.
func (s *Sim) AddOutput(txid, amount string) error {
	d, err := decimal.Parse(amount)
	if err != nil || !d.IsPos() || d.Trim(0).Scale() > 8 {
		return fmt.Errorf("btcpaysim: amount %q is not a positive BTC amount", amount)
	}
	return s.onWalletTx(txid, func(t *walletTx) error {
		t.amount, _ = t.amount.Add(d)
		return nil
	})
}

// ReplaceTransaction marks unconfirmed wallet transaction txid replaced: a
// conflicting transaction (a fee bump, a double spend of its inputs) was
// mined instead, so it can no longer confirm unless that block is
// reorganised away (ConfirmTransaction then confirms it). BTCPay's
// wallet reports it with status Replaced.
func (s *Sim) ReplaceTransaction(txid string) error {
	return s.onWalletTx(txid, func(t *walletTx) error {
		if t.confirmations > 0 {
			return fmt.Errorf("%w: transaction %s is confirmed", ErrInvalidState, txid)
		}
		t.replaced = true
		return nil
	})
}

// ConfirmTransaction gives a wallet transaction confs confirmations.
func (s *Sim) ConfirmTransaction(txid string, confs int64) error {
	return s.onWalletTx(txid, func(*walletTx) error {
		s.wallet.confirm(txid, confs)
		return nil
	})
}

// onWalletTx runs f on wallet transaction txid under the simulator's lock,
// or fails when the wallet has no such transaction.
func (s *Sim) onWalletTx(txid string, f func(t *walletTx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.wallet.find(txid)
	if t == nil {
		return fmt.Errorf("btcpaysim: no wallet transaction %s", txid)
	}
	return f(t)
}

// onChainWallet checks the path's payment method is the store's BTC wallet.
func (s *Sim) onChainWallet(w http.ResponseWriter, r *http.Request) bool {
	id := btcpay.NormalizeMethodID(r.PathValue("paymentMethodId"))
	if id != btcpay.MethodBTCChain || !s.hasMethod(id) {
		problem(w, http.StatusNotFound, "unknown-paymentMethodId", "The payment method specified does not exist")
		return false
	}
	return true
}

func (s *Sim) walletOverview(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.onChainWallet(w, r) {
		return
	}
	c, u := s.wallet.balances()
	total, _ := c.Add(u)
	// BTCPay also sends the wallet's label, which its template leaves out.
	writeJSON(w, http.StatusOK, map[string]string{"balance": fmtDec(total, 8), "unconfirmedBalance": fmtDec(u, 8),
		"confirmedBalance": fmtDec(c, 8), "label": "btcpaysim hot wallet"})
}

func (s *Sim) walletFeeRate(w http.ResponseWriter, r *http.Request) {
	if bt := r.URL.Query().Get("blockTarget"); bt != "" {
		if n, err := strconv.Atoi(bt); err != nil || n < 1 {
			invalid(w, "blockTarget", "blockTarget should be greater than 0")
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.onChainWallet(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]json.RawMessage{"feeRate": json.RawMessage(s.feeRate.String())})
}

func (s *Sim) walletTransactions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	skip, _ := strconv.Atoi(q.Get("skip"))
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 1 << 30
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.onChainWallet(w, r) {
		return
	}
	out := []txJSON{}
	for i := len(s.wallet.txs) - 1; i >= 0; i-- { // newest first
		t := s.wallet.txs[i]
		v := t.view()
		if len(q["statusFilter"]) > 0 && !slices.ContainsFunc(q["statusFilter"], func(f string) bool { return strings.EqualFold(f, v.Status) }) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// walletTransaction answers GET .../wallet/transactions/{transactionId}.
func (s *Sim) walletTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.onChainWallet(w, r) {
		return
	}
	t := s.wallet.find(r.PathValue("transactionId"))
	if t == nil {
		problem(w, http.StatusNotFound, "transaction-not-found", "The transaction was not found")
		return
	}
	writeJSON(w, http.StatusOK, t.view())
}

// UnlinkTransaction removes the payouts linked to wallet transaction txid
// from the wallet's object graph, as for a transaction sent outside the
// payout processor (payouts paid from the wallet and marked by hand), or
// on a server without wallet objects.
func (s *Sim) UnlinkTransaction(txid string) error {
	return s.onWalletTx(txid, func(t *walletTx) error {
		t.unlinked = true
		return nil
	})
}

type objectLinkJSON struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	LinkData   map[string]any `json:"linkData"`
	ObjectData map[string]any `json:"objectData,omitempty"`
}

type walletObjectJSON struct {
	Type  string           `json:"type"`
	ID    string           `json:"id"`
	Data  map[string]any   `json:"data"`
	Links []objectLinkJSON `json:"links"`
}

// walletObject answers GET .../wallet/objects/{objectType}/{objectId} for
// transactions: BTCPay's payout processor links every payout of the batch
// it sends to the transaction, and invoice payments link their invoice.
// A transaction with neither has no object.
func (s *Sim) walletObject(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.onChainWallet(w, r) {
		return
	}
	var t *walletTx
	if r.PathValue("objectType") == "tx" {
		t = s.wallet.find(r.PathValue("objectId"))
	}
	linked := t != nil && !t.unlinked && len(t.payouts) > 0
	if t == nil || (!linked && t.invoiceID == "") {
		problem(w, http.StatusNotFound, "wallet-object-not-found", "The wallet object was not found")
		return
	}
	neighbours := r.URL.Query().Get("includeNeighbourData") != "false"
	link := func(typ, id string) objectLinkJSON {
		l := objectLinkJSON{Type: typ, ID: id, LinkData: map[string]any{}}
		if neighbours {
			l.ObjectData = map[string]any{}
		}
		return l
	}
	out := walletObjectJSON{Type: "tx", ID: t.hash, Data: map[string]any{}, Links: []objectLinkJSON{}}
	if linked {
		for _, id := range t.payouts {
			out.Links = append(out.Links, link("payout", id))
		}
	}
	if t.invoiceID != "" {
		out.Links = append(out.Links, link("invoice", t.invoiceID))
	}
	writeJSON(w, http.StatusOK, out)
}

type txJSON struct {
	TransactionHash string                    `json:"transactionHash"`
	Comment         string                    `json:"comment"`
	Amount          string                    `json:"amount"`
	BlockHash       *string                   `json:"blockHash"`
	BlockHeight     *int64                    `json:"blockHeight"` // a number on the server
	Confirmations   int64                     `json:"confirmations"`
	Timestamp       int64                     `json:"timestamp"`
	Status          string                    `json:"status"`
	Labels          map[string]map[string]any `json:"labels"` // a dictionary on the server
}

func (t *walletTx) view() txJSON {
	status := btcpay.TxUnconfirmed
	switch {
	case t.confirmations > 0:
		status = btcpay.TxConfirmed
	case t.replaced:
		status = btcpay.TxReplaced
	}
	v := txJSON{TransactionHash: t.hash, Amount: fmtDec(t.amount, 8), Confirmations: t.confirmations,
		Timestamp: t.ts.Unix(), Status: status, Labels: map[string]map[string]any{}}
	if t.height > 0 {
		h, bh := t.height, fmt.Sprintf("%064x", t.height)
		v.BlockHeight, v.BlockHash = &h, &bh
	}
	if t.invoiceID != "" {
		v.Labels["invoice"] = map[string]any{"type": "invoice", "text": "invoice", "ref": t.invoiceID}
	}
	if len(t.payouts) > 0 {
		v.Labels["payout"] = map[string]any{"type": "payout", "text": "payout", "ref": t.payouts[0]}
	}
	return v
}

func (s *Sim) lightningBalance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.EqualFold(r.PathValue("cryptoCode"), "BTC") || !s.hasMethod(btcpay.MethodBTCLN) {
		problem(w, http.StatusNotFound, "lightning-node-unavailable", "The lightning node is not set up")
		return
	}
	str := strconv.FormatInt
	writeJSON(w, http.StatusOK, map[string]any{
		"onchain":  map[string]string{"confirmed": "0", "unconfirmed": "0", "reserved": "0"},
		"offchain": map[string]string{"opening": "0", "local": str(s.wallet.lnLocalMsat, 10), "remote": str(s.wallet.lnRemoteMsat, 10), "closing": "0"},
	})
}
