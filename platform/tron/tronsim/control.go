package tronsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"svc/platform/chain"
)

// The /sim/ control API drives a Sim over HTTP, for local runs:
//
//	POST /sim/transfers  {"from","to","amount","txid"?,"contract"?,"success"?,"pending"?} -> {"txid"}
//	POST /sim/confirm    {"txid"}                        puts a pending transfer in a block
//	POST /sim/blocks     {"count"}                       mines empty blocks -> {"latest","solid"}
//	POST /sim/balances   {"address","trx_sun"?,"usdt"?}  sets balances (smallest units)
//	POST /sim/mode       {"mode": "up"|"errors"|"drop"|"hang"|"rate_limited"}
//	GET  /sim/state                                      -> {"latest","solid","mode","usdt_contract"}
//
// Amounts are integers of smallest units, as JSON numbers or strings.
func (s *Sim) control(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/sim/state" {
		latest, solid := s.Head()
		s.mu.Lock()
		mode, usdt := s.mode, s.usdt
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"latest": latest, "solid": solid, "mode": modeNames[mode], "usdt_contract": usdt.String()})
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
		return
	}
	var in struct {
		TxID     string       `json:"txid"`
		Contract string       `json:"contract"`
		From     string       `json:"from"`
		To       string       `json:"to"`
		Amount   json.Number  `json:"amount"`
		Success  *bool        `json:"success"`
		Pending  bool         `json:"pending"`
		Count    int          `json:"count"`
		Address  string       `json:"address"`
		TRXSun   *json.Number `json:"trx_sun"`
		USDT     *json.Number `json:"usdt"`
		Mode     string       `json:"mode"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		bad(w, "body: %v", err)
		return
	}
	switch r.URL.Path {
	case "/sim/transfers":
		from, err1 := chain.ParseTronAddress(in.From)
		to, err2 := chain.ParseTronAddress(in.To)
		amount, err3 := units(in.Amount)
		if err := firstErr(err1, err2, err3); err != nil {
			bad(w, "from, to and amount: %v", err)
			return
		}
		tx := Tx{ID: in.TxID, Owner: from, Pending: in.Pending, Logs: []Log{{From: from, To: to, Amount: amount}}}
		if in.Contract != "" {
			c, err := chain.ParseTronAddress(in.Contract)
			if err != nil {
				bad(w, "contract: %v", err)
				return
			}
			tx.Contract, tx.Logs[0].Contract = c, c
		}
		if in.Success != nil && !*in.Success {
			tx.Result = "REVERT"
		}
		writeJSON(w, http.StatusOK, map[string]string{"txid": s.AddTx(tx)})
	case "/sim/confirm":
		if !s.Confirm(in.TxID) {
			bad(w, "no pending transaction %q", in.TxID)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"txid": in.TxID})
	case "/sim/blocks":
		if in.Count < 1 || in.Count > 100_000 {
			bad(w, "count must be from 1 to 100000")
			return
		}
		s.MineBlocks(in.Count)
		latest, solid := s.Head()
		writeJSON(w, http.StatusOK, map[string]int64{"latest": latest, "solid": solid})
	case "/sim/balances":
		a, err := chain.ParseTronAddress(in.Address)
		if err != nil {
			bad(w, "address: %v", err)
			return
		}
		for _, b := range []struct {
			field string
			v     *json.Number
			set   func(chain.TronAddress, int64)
		}{{"trx_sun", in.TRXSun, s.SetTRXBalance}, {"usdt", in.USDT, s.SetUSDTBalance}} {
			if b.v == nil {
				continue
			}
			v, err := units(*b.v)
			if err != nil {
				bad(w, "%s: %v", b.field, err)
				return
			}
			b.set(a, v)
		}
		writeJSON(w, http.StatusOK, map[string]string{"address": a.String()})
	case "/sim/mode":
		m, ok := modeByName[in.Mode]
		if !ok {
			bad(w, "mode must be up, errors, drop, hang or rate_limited")
			return
		}
		s.SetMode(m)
		writeJSON(w, http.StatusOK, map[string]string{"mode": in.Mode})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown control path"})
	}
}

var modeNames = map[Mode]string{Up: "up", Errors: "errors", Drop: "drop", Hang: "hang", RateLimited: "rate_limited"}

var modeByName = map[string]Mode{"up": Up, "errors": Errors, "drop": Drop, "hang": Hang, "rate_limited": RateLimited}

func units(n json.Number) (int64, error) {
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer of smallest units", string(n))
	}
	return v, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func bad(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf(format, args...)})
}
