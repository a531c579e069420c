package tron

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"time"

	"svc/platform/chain"
)

// TransferTopic is topic0 of the ERC-20/TRC-20 event
// Transfer(address,address,uint256): keccak-256 of that signature.
const TransferTopic = "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

// Transaction is what the node says about one transaction.
type Transaction struct {
	ID string // 64 lower-case hex digits
	// Pending is true when the node knows the transaction but it is not in
	// a block yet: there is no receipt, and the fields below it are zero.
	Pending bool
	// ContractType is the kind of the transaction's contract:
	// "TriggerSmartContract" for a token transfer, "TransferContract" for TRX.
	ContractType string
	// Owner is the account that signed the transaction; Contract the smart
	// contract it called (zero for other contract types).
	Owner    chain.TronAddress
	Contract chain.TronAddress
	// ContractRet is the execution result in the transaction itself
	// ("SUCCESS", "REVERT", "OUT_OF_ENERGY", ...).
	ContractRet string

	BlockNumber int64
	BlockTime   time.Time
	FeeSun      int64 // TRX burnt for energy and bandwidth, in sun
	// Result is the receipt's result ("SUCCESS", "REVERT", ...; empty for
	// contract types without a VM receipt). Failed is the receipt's top-level
	// "FAILED" marker; ResMessage its decoded reason.
	Result     string
	Failed     bool
	ResMessage string
	// Transfers are the TRC-20 Transfer events the transaction emitted, in
	// log order. Undecoded counts Transfer-topic logs that are not a TRC-20
	// transfer with an amount that fits int64 (NFT transfers, absurd
	// amounts from spam tokens); they are left out of Transfers.
	Transfers []Transfer
	Undecoded int
}

// Transfer is one TRC-20 Transfer event.
type Transfer struct {
	Contract chain.TronAddress // the token contract that emitted it
	From     chain.TronAddress
	To       chain.TronAddress
	Amount   int64 // in the token's smallest units
	LogIndex int   // position in the receipt's log list
}

// Succeeded reports whether the transaction is in a block and executed
// successfully: only then are its Transfer events real.
func (t *Transaction) Succeeded() bool {
	vmOK := t.Result == "SUCCESS" || (t.Result == "" && t.ContractType != "TriggerSmartContract")
	return !t.Pending && !t.Failed && t.ContractRet == "SUCCESS" && vmOK
}

// TransfersOf returns the transfers emitted by the token contract.
func (t *Transaction) TransfersOf(contract chain.TronAddress) []Transfer {
	var out []Transfer
	for _, tr := range t.Transfers {
		if tr.Contract == contract {
			out = append(out, tr)
		}
	}
	return out
}

// Confirmations returns how many blocks, counting its own, hold the
// transaction when head is the latest block number; 0 while pending.
func (t *Transaction) Confirmations(head int64) int64 {
	if t.Pending || head < t.BlockNumber {
		return 0
	}
	return head - t.BlockNumber + 1
}

// The java-tron answers, reduced to what is read.
type txInfoJSON struct {
	ID              string `json:"id"`
	Fee             int64  `json:"fee"`
	BlockNumber     int64  `json:"blockNumber"`
	BlockTimeStamp  int64  `json:"blockTimeStamp"`
	ContractAddress string `json:"contract_address"`
	Receipt         struct {
		Result string `json:"result"`
	} `json:"receipt"`
	Result     string `json:"result"`
	ResMessage string `json:"resMessage"`
	Log        []struct {
		Address string   `json:"address"`
		Topics  []string `json:"topics"`
		Data    string   `json:"data"`
	} `json:"log"`
}

type txJSON struct {
	TxID string `json:"txID"`
	Ret  []struct {
		ContractRet string `json:"contractRet"`
	} `json:"ret"`
	RawData struct {
		Contract []struct {
			Type      string `json:"type"`
			Parameter struct {
				Value struct {
					OwnerAddress    string `json:"owner_address"`
					ContractAddress string `json:"contract_address"`
				} `json:"value"`
			} `json:"parameter"`
		} `json:"contract"`
	} `json:"raw_data"`
}

// Transaction returns the transaction txid with its receipt and Transfer
// events, from the full node (the latest, not yet solidified state: compare
// BlockNumber with SolidBlock for finality). errors.Is(err, ErrNotFound)
// when the node does not know it.
func (c *Client) Transaction(ctx context.Context, txid string) (*Transaction, error) {
	id, err := normalizeTxID(txid)
	if err != nil {
		return nil, err
	}
	var raw txJSON
	if err := c.post(ctx, "gettransactionbyid", "/wallet/gettransactionbyid", map[string]any{"value": id, "visible": true}, &raw); err != nil {
		return nil, err
	}
	if raw.TxID == "" {
		return nil, fmt.Errorf("tron gettransactionbyid %s: %w", id, ErrNotFound)
	}
	if !strings.EqualFold(raw.TxID, id) {
		return nil, &UnreachableError{Op: "gettransactionbyid", Message: "answer is about transaction " + raw.TxID}
	}
	tx := &Transaction{ID: id}
	if len(raw.Ret) > 0 {
		tx.ContractRet = raw.Ret[0].ContractRet
	}
	if len(raw.RawData.Contract) > 0 {
		ct := raw.RawData.Contract[0]
		tx.ContractType = ct.Type
		if tx.Owner, err = nodeAddress(ct.Parameter.Value.OwnerAddress); err != nil {
			return nil, &UnreachableError{Op: "gettransactionbyid", Err: fmt.Errorf("owner_address: %w", err)}
		}
		if ct.Parameter.Value.ContractAddress != "" {
			if tx.Contract, err = nodeAddress(ct.Parameter.Value.ContractAddress); err != nil {
				return nil, &UnreachableError{Op: "gettransactionbyid", Err: fmt.Errorf("contract_address: %w", err)}
			}
		}
	}

	var info txInfoJSON
	if err := c.post(ctx, "gettransactioninfobyid", "/wallet/gettransactioninfobyid", map[string]any{"value": id}, &info); err != nil {
		return nil, err
	}
	if info.ID == "" {
		// Known, but not executed in a block yet.
		tx.Pending = true
		return tx, nil
	}
	if !strings.EqualFold(info.ID, id) {
		return nil, &UnreachableError{Op: "gettransactioninfobyid", Message: "answer is about transaction " + info.ID}
	}
	tx.BlockNumber = info.BlockNumber
	tx.BlockTime = time.UnixMilli(info.BlockTimeStamp).UTC()
	tx.FeeSun = info.Fee
	tx.Result = info.Receipt.Result
	tx.Failed = info.Result == "FAILED"
	tx.ResMessage = decodeResMessage(info.ResMessage)
	for i, l := range info.Log {
		if len(l.Topics) == 0 || !strings.EqualFold(strings.TrimPrefix(l.Topics[0], "0x"), TransferTopic) {
			continue
		}
		tr, ok := decodeTransfer(l.Address, l.Topics, l.Data)
		if !ok {
			tx.Undecoded++
			continue
		}
		tr.LogIndex = i
		tx.Transfers = append(tx.Transfers, tr)
	}
	return tx, nil
}

// decodeTransfer reads a TRC-20 Transfer log: topics are [Transfer, from,
// to], each address a 32-byte word with 12 zero bytes first, and data is
// the amount as one 32-byte big-endian word.
func decodeTransfer(address string, topics []string, data string) (Transfer, bool) {
	if len(topics) != 3 {
		return Transfer{}, false
	}
	var tr Transfer
	var err error
	if tr.Contract, err = chain.TronAddressFromHex(address); err != nil {
		return Transfer{}, false
	}
	var ok bool
	if tr.From, ok = wordAddress(topics[1]); !ok {
		return Transfer{}, false
	}
	if tr.To, ok = wordAddress(topics[2]); !ok {
		return Transfer{}, false
	}
	word, err := hex.DecodeString(strings.TrimPrefix(data, "0x"))
	if err != nil || len(word) != 32 {
		return Transfer{}, false
	}
	amount := new(big.Int).SetBytes(word)
	if !amount.IsInt64() {
		return Transfer{}, false
	}
	tr.Amount = amount.Int64()
	return tr, true
}

func wordAddress(w string) (chain.TronAddress, bool) {
	b, err := hex.DecodeString(strings.TrimPrefix(w, "0x"))
	if err != nil || len(b) != 32 {
		return chain.TronAddress{}, false
	}
	for _, z := range b[:12] {
		if z != 0 {
			return chain.TronAddress{}, false
		}
	}
	var a chain.TronAddress
	copy(a[:], b[12:])
	return a, true
}

// nodeAddress reads an address as the node writes it: base58 with
// visible=true, hex (41...) otherwise.
func nodeAddress(s string) (chain.TronAddress, error) {
	if strings.HasPrefix(s, "T") {
		return chain.ParseTronAddress(s)
	}
	return chain.TronAddressFromHex(s)
}

// decodeResMessage turns the hex-encoded revert reason into text when it
// is printable, and keeps it as is otherwise.
func decodeResMessage(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil {
		return s
	}
	for _, r := range string(b) {
		if r < ' ' || r == 0x7f {
			return s
		}
	}
	return string(b)
}

func normalizeTxID(txid string) (string, error) {
	id := strings.ToLower(strings.TrimPrefix(txid, "0x"))
	if len(id) != 64 {
		return "", &RefusedError{Op: "transaction", Message: fmt.Sprintf("a transaction id has 64 hex digits, %q has %d", txid, len(id))}
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", &RefusedError{Op: "transaction", Message: fmt.Sprintf("transaction id %q is not hex", txid)}
	}
	return id, nil
}
