package tron

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/big"

	"svc/platform/chain"
)

// TRXBalance returns the TRX balance of addr in sun (1 TRX = 1,000,000
// sun), from the full node. An account that was never activated has 0.
func (c *Client) TRXBalance(ctx context.Context, addr chain.TronAddress) (int64, error) {
	var out struct {
		Address string `json:"address"`
		Balance int64  `json:"balance"`
	}
	if err := c.post(ctx, "getaccount", "/wallet/getaccount", map[string]any{"address": addr.String(), "visible": true}, &out); err != nil {
		return 0, err
	}
	if out.Balance < 0 {
		return 0, &UnreachableError{Op: "getaccount", Message: fmt.Sprintf("negative balance %d", out.Balance)}
	}
	return out.Balance, nil
}

// USDTBalance returns the USDT balance of addr in the token's smallest
// units (6 decimals), by calling balanceOf on the USDT contract.
func (c *Client) USDTBalance(ctx context.Context, addr chain.TronAddress) (int64, error) {
	return c.TokenBalance(ctx, c.usdt, addr)
}

// TokenBalance returns the TRC-20 balance of addr at contract, in the
// token's smallest units. It calls balanceOf(address) as a constant call,
// which costs nothing and changes nothing.
func (c *Client) TokenBalance(ctx context.Context, contract, addr chain.TronAddress) (int64, error) {
	const op = "triggerconstantcontract"
	var out struct {
		Result struct {
			Result  bool   `json:"result"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"result"`
		ConstantResult []string `json:"constant_result"`
	}
	in := map[string]any{
		"owner_address":     addr.String(),
		"contract_address":  contract.String(),
		"function_selector": "balanceOf(address)",
		"parameter":         fmt.Sprintf("%064s", addr.EVMHex()),
		"visible":           true,
	}
	if err := c.post(ctx, op, "/wallet/triggerconstantcontract", in, &out); err != nil {
		return 0, err
	}
	if !out.Result.Result {
		msg := out.Result.Code
		if m := decodeResMessage(out.Result.Message); m != "" {
			msg += ": " + m
		}
		return 0, &RefusedError{Op: op, Status: 200, Message: msg}
	}
	if len(out.ConstantResult) == 0 {
		return 0, &UnreachableError{Op: op, Message: "no constant_result"}
	}
	word, err := hex.DecodeString(out.ConstantResult[0])
	if err != nil || len(word) != 32 {
		return 0, &UnreachableError{Op: op, Message: fmt.Sprintf("constant_result %q is not one 32-byte word", out.ConstantResult[0])}
	}
	v := new(big.Int).SetBytes(word)
	if !v.IsInt64() {
		return 0, &UnreachableError{Op: op, Message: "balance does not fit in int64"}
	}
	return v.Int64(), nil
}
