package tron

import (
	"context"
	"time"
)

// Block identifies a block.
type Block struct {
	Number int64
	ID     string
	Time   time.Time
}

type blockJSON struct {
	BlockID     string `json:"blockID"`
	BlockHeader struct {
		RawData struct {
			Number    int64 `json:"number"`
			Timestamp int64 `json:"timestamp"`
		} `json:"raw_data"`
	} `json:"block_header"`
}

// LatestBlock returns the full node's latest block.
func (c *Client) LatestBlock(ctx context.Context) (Block, error) {
	return c.block(ctx, "getnowblock", "/wallet/getnowblock")
}

// SolidBlock returns the latest solidified (irreversible) block: a
// transaction at or below its number is final.
func (c *Client) SolidBlock(ctx context.Context) (Block, error) {
	return c.block(ctx, "solidity getnowblock", "/walletsolidity/getnowblock")
}

// Ping is the readiness check: the node answers with a latest block.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.LatestBlock(ctx)
	return err
}

func (c *Client) block(ctx context.Context, op, path string) (Block, error) {
	var out blockJSON
	if err := c.post(ctx, op, path, struct{}{}, &out); err != nil {
		return Block{}, err
	}
	if out.BlockHeader.RawData.Number <= 0 {
		return Block{}, &UnreachableError{Op: op, Message: "answer has no block number"}
	}
	return Block{
		Number: out.BlockHeader.RawData.Number,
		ID:     out.BlockID,
		Time:   time.UnixMilli(out.BlockHeader.RawData.Timestamp).UTC(),
	}, nil
}
