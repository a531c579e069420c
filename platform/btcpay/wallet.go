package btcpay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
)

// WalletOverview is the store's on-chain wallet balance, in BTC.
type WalletOverview struct {
	Balance            Amount `json:"balance"`
	UnconfirmedBalance Amount `json:"unconfirmedBalance"`
	ConfirmedBalance   Amount `json:"confirmedBalance"`
	Label              string `json:"label"`
}

// WalletOverview returns the BTC on-chain wallet's balance.
func (c *Client) WalletOverview(ctx context.Context) (WalletOverview, error) {
	return callFor[WalletOverview](ctx, c, "wallet overview", "GET", c.storePath("payment-methods", MethodBTCChain, "wallet"), nil, nil)
}

// FeeRate returns the wallet's fee-rate estimate in sat/vB for confirmation
// within blockTarget blocks (0 uses the store's default target). BTCPay
// sends it as a JSON number; it is read exactly, never as a float.
func (c *Client) FeeRate(ctx context.Context, blockTarget int) (Amount, error) {
	var q url.Values
	if blockTarget > 0 {
		q = url.Values{"blockTarget": {strconv.Itoa(blockTarget)}}
	}
	var out struct {
		FeeRate json.RawMessage `json:"feeRate"`
	}
	if err := c.call(ctx, "fee rate", "GET", c.storePath("payment-methods", MethodBTCChain, "wallet", "feerate"), q, nil, &out); err != nil {
		return Amount{}, err
	}
	var rate Amount
	if err := json.Unmarshal(bytes.TrimSpace(out.FeeRate), &rate); err != nil || len(out.FeeRate) == 0 || rate.IsNeg() {
		return Amount{}, &UnreachableError{Op: "fee rate", Err: fmt.Errorf("fee rate %s is not a non-negative decimal", out.FeeRate)}
	}
	return rate, nil
}

// WalletTransaction is one transaction of the on-chain wallet.
type WalletTransaction struct {
	TransactionHash string  `json:"transactionHash"`
	Comment         string  `json:"comment"`
	Amount          Amount  `json:"amount"` // net change of the wallet: positive received, negative sent (fee included)
	BlockHash       *string `json:"blockHash"`
	// BlockHeight and Confirmations are numbers on the server (strings in
	// BTCPay's template); both are read.
	BlockHeight   FlexInt         `json:"blockHeight"`
	Confirmations FlexInt         `json:"confirmations"`
	Timestamp     UnixTime        `json:"timestamp"` // first seen
	Status        string          `json:"status"`    // Confirmed, Unconfirmed or Replaced
	Labels        json.RawMessage `json:"labels"`
}

// Wallet transaction statuses. Replaced: a conflicting transaction was
// confirmed instead (BTCPay's TransactionStatus), so this one cannot be
// unless a reorganisation drops that one.
const (
	TxConfirmed   = "Confirmed"
	TxUnconfirmed = "Unconfirmed"
	TxReplaced    = "Replaced"
)

// WalletTransactionsParams filters and pages the wallet's transactions.
type WalletTransactionsParams struct {
	Statuses    []string // TxConfirmed, TxUnconfirmed, TxReplaced; none means all
	LabelFilter string
	Skip, Limit int
}

// WalletTransactions lists the on-chain wallet's transactions, newest
// first.
func (c *Client) WalletTransactions(ctx context.Context, p WalletTransactionsParams) ([]WalletTransaction, error) {
	q := url.Values{}
	for _, s := range p.Statuses {
		q.Add("statusFilter", s)
	}
	if p.LabelFilter != "" {
		q.Set("labelFilter", p.LabelFilter)
	}
	if p.Skip > 0 {
		q.Set("skip", strconv.Itoa(p.Skip))
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return callFor[[]WalletTransaction](ctx, c, "wallet transactions", "GET", c.storePath("payment-methods", MethodBTCChain, "wallet", "transactions"), q, nil)
}

// WalletTransaction returns one on-chain wallet transaction;
// errors.Is(err, ErrNotFound) when the wallet does not know it.
func (c *Client) WalletTransaction(ctx context.Context, txid string) (WalletTransaction, error) {
	return callFor[WalletTransaction](ctx, c, "wallet transaction", "GET", c.storePath("payment-methods", MethodBTCChain, "wallet", "transactions", txid), nil, nil)
}

// LightningBalance is the store Lightning node's balance: on-chain parts in
// satoshis, channel parts in millisatoshis.
type LightningBalance struct {
	Onchain *struct {
		Confirmed   FlexInt `json:"confirmed"`
		Unconfirmed FlexInt `json:"unconfirmed"`
		Reserved    FlexInt `json:"reserved"`
	} `json:"onchain"`
	Offchain *struct {
		Opening FlexInt `json:"opening"`
		Local   FlexInt `json:"local"`
		Remote  FlexInt `json:"remote"`
		Closing FlexInt `json:"closing"`
	} `json:"offchain"`
}

// LocalMsat is what the node can spend in its channels, in millisatoshis
// (0 when the node does not say).
func (b LightningBalance) LocalMsat() int64 {
	if b.Offchain == nil {
		return 0
	}
	return b.Offchain.Local.V
}

// HasChannels reports an answer that carries the channels' balance: one
// without it says nothing about the node's money (not zero).
func (b LightningBalance) HasChannels() bool { return b.Offchain != nil }

// LightningBalance returns the store's BTC Lightning node balance.
func (c *Client) LightningBalance(ctx context.Context) (LightningBalance, error) {
	return callFor[LightningBalance](ctx, c, "lightning balance", "GET", c.storePath("lightning", "BTC", "balance"), nil, nil)
}

// TransactionPayoutIDs returns the ids of the payouts that BTCPay's payout
// processor linked to on-chain transaction txid in the wallet's object
// graph (GET .../wallet/objects/tx/{txid}: the processor links every payout
// of the batch it sends as a "payout" neighbour of the transaction). It is
// the narrow way to the payouts of one transaction; the payout list has no
// filter and grows with every payout the store ever made. Nil, with no
// error, when the wallet has no object for txid or the object links no
// payout: a transaction sent outside the processor (payouts marked by hand),
// or a server without wallet objects; and nil too when the server refuses
// the read (BTCPay's template asks canmodifystoresettings for it, which a
// least-privilege key of 2.4 may not have): the caller then has to list.
func (c *Client) TransactionPayoutIDs(ctx context.Context, txid string) ([]string, error) {
	var out struct {
		Links []struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"links"`
	}
	q := url.Values{"includeNeighbourData": {"false"}}
	err := c.call(ctx, "wallet transaction object", "GET", c.storePath("payment-methods", MethodBTCChain, "wallet", "objects", "tx", txid), q, nil, &out)
	if errors.Is(err, ErrRefused) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, l := range out.Links {
		if l.Type == "payout" && l.ID != "" && !slices.Contains(ids, l.ID) {
			ids = append(ids, l.ID)
		}
	}
	return ids, nil
}
