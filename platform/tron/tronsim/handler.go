package tronsim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"svc/platform/chain"
)

const transferTopic = "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

// ServeHTTP answers the node paths and the /sim/ control API.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/sim/") {
		s.control(w, r)
		return
	}
	s.mu.Lock()
	s.calls[r.URL.Path]++
	s.lastKey = r.Header.Get("TRON-PRO-API-KEY")
	mode, key := s.mode, s.apiKey
	s.mu.Unlock()

	switch mode {
	case Errors:
		http.Error(w, "503 Service Temporarily Unavailable", http.StatusServiceUnavailable)
		return
	case Drop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case Hang:
		<-r.Context().Done()
		return
	case RateLimited:
		writeJSON(w, http.StatusForbidden, map[string]any{"Success": false, "Error": "The key exceeds the frequency limit(15), and the query server is suspended for 30s"})
		return
	}
	if key != "" && r.Header.Get("TRON-PRO-API-KEY") != key {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"Success": false, "Error": "ApiKey not exists"})
		return
	}
	body, err := params(r)
	if err != nil {
		// java-tron reports a bad request body in a 200.
		writeJSON(w, http.StatusOK, map[string]any{"Error": "class org.json.JSONException : " + err.Error()})
		return
	}
	switch r.URL.Path {
	case "/wallet/gettransactionbyid", "/walletsolidity/gettransactionbyid":
		s.getTransaction(w, body, r.URL.Path == "/walletsolidity/gettransactionbyid")
	case "/wallet/gettransactioninfobyid", "/walletsolidity/gettransactioninfobyid":
		s.getTransactionInfo(w, body, r.URL.Path == "/walletsolidity/gettransactioninfobyid")
	case "/wallet/getaccount", "/walletsolidity/getaccount":
		s.getAccount(w, body)
	case "/wallet/triggerconstantcontract", "/walletsolidity/triggerconstantcontract":
		s.triggerConstant(w, body)
	case "/wallet/getnowblock":
		s.nowBlock(w, false)
	case "/walletsolidity/getnowblock":
		s.nowBlock(w, true)
	default:
		http.NotFound(w, r)
	}
}

// params reads a request's arguments: a JSON body, or the query string of
// a GET (java-tron accepts both).
func params(r *http.Request) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func str(p map[string]any, k string) string {
	v, _ := p[k].(string)
	return v
}

func visible(p map[string]any) bool {
	switch v := p["visible"].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// addr renders an address the way java-tron does: base58 when the request
// asked for visible=true, hex otherwise.
func addr(a chain.TronAddress, vis bool) string {
	if vis {
		return a.String()
	}
	return a.Hex()
}

func word(b []byte) string { return fmt.Sprintf("%064s", hex.EncodeToString(b)) }

func (s *Sim) lookup(id string, solid bool) (*simTx, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.txs[strings.ToLower(id)]
	if !ok {
		return nil, false
	}
	if solid && (st.Pending || st.block > s.head-s.solidLag) {
		return nil, false
	}
	c := *st
	c.Logs = append([]Log(nil), st.Logs...)
	return &c, true
}

func (s *Sim) getTransaction(w http.ResponseWriter, p map[string]any, solid bool) {
	st, ok := s.lookup(str(p, "value"), solid)
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	vis := visible(p)
	ret := "SUCCESS"
	if st.Result != "" && st.Result != "SUCCESS" {
		ret = st.Result
	}
	data := "a9059cbb"
	if len(st.Logs) > 0 {
		to := st.Logs[0].To
		data += word(to[:]) + fmt.Sprintf("%064x", st.Logs[0].Amount)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ret":       []any{map[string]any{"contractRet": ret}},
		"signature": []string{strings.Repeat("ab", 65)},
		"txID":      st.ID,
		"raw_data": map[string]any{
			"contract": []any{map[string]any{
				"parameter": map[string]any{
					"value": map[string]any{
						"data":             data,
						"owner_address":    addr(st.Owner, vis),
						"contract_address": addr(st.Contract, vis),
					},
					"type_url": "type.googleapis.com/protocol.TriggerSmartContract",
				},
				"type": "TriggerSmartContract",
			}},
			"ref_block_bytes": "0000",
			"ref_block_hash":  "0000000000000000",
			"expiration":      st.blockTime.UnixMilli() + 60_000,
			"fee_limit":       100_000_000,
			"timestamp":       st.blockTime.UnixMilli(),
		},
		"raw_data_hex": "00",
	})
}

func (s *Sim) getTransactionInfo(w http.ResponseWriter, p map[string]any, solid bool) {
	st, ok := s.lookup(str(p, "value"), solid)
	if !ok || st.Pending {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	result := "SUCCESS"
	if st.Result != "" {
		result = st.Result
	}
	info := map[string]any{
		"id":               st.ID,
		"blockNumber":      st.block,
		"blockTimeStamp":   st.blockTime.UnixMilli(),
		"contractResult":   []string{""},
		"contract_address": st.Contract.Hex(),
		"receipt": map[string]any{
			"energy_usage_total": 14650,
			"net_usage":          345,
			"result":             result,
		},
	}
	if st.FeeSun > 0 {
		info["fee"] = st.FeeSun
		info["receipt"].(map[string]any)["energy_fee"] = st.FeeSun
	}
	if result != "SUCCESS" {
		info["result"] = "FAILED"
		info["resMessage"] = hex.EncodeToString([]byte("REVERT opcode executed"))
	} else if len(st.Logs) > 0 {
		logs := make([]any, len(st.Logs))
		for i, l := range st.Logs {
			from, to := l.From, l.To
			logs[i] = map[string]any{
				"address": l.Contract.EVMHex(),
				"topics":  []string{transferTopic, word(from[:]), word(to[:])},
				"data":    fmt.Sprintf("%064x", l.Amount),
			}
		}
		info["log"] = logs
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Sim) getAccount(w http.ResponseWriter, p map[string]any) {
	a, ok := addrParam(w, p, "address")
	if !ok {
		return
	}
	s.mu.Lock()
	bal, ok := s.trx[a]
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{}) // never activated
		return
	}
	out := map[string]any{"address": addr(a, visible(p)), "create_time": 1_600_000_000_000}
	if bal != 0 { // protobuf JSON leaves zero values out
		out["balance"] = bal
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Sim) triggerConstant(w http.ResponseWriter, p map[string]any) {
	contract, ok := addrParam(w, p, "contract_address")
	if !ok {
		return
	}
	param := str(p, "parameter")
	holderWord, err := hex.DecodeString(param)
	if str(p, "function_selector") != "balanceOf(address)" || err != nil || len(holderWord) != 32 {
		writeJSON(w, http.StatusOK, map[string]any{"result": map[string]any{
			"code": "CONTRACT_VALIDATE_ERROR", "message": hex.EncodeToString([]byte("the simulator only answers balanceOf(address)")),
		}})
		return
	}
	var holder chain.TronAddress
	copy(holder[:], holderWord[12:])
	s.mu.Lock()
	known := contract == s.usdt
	for k := range s.tokens {
		known = known || k[0] == contract
	}
	bal := s.tokens[[2]chain.TronAddress{contract, holder}]
	s.mu.Unlock()
	if !known {
		writeJSON(w, http.StatusOK, map[string]any{"result": map[string]any{
			"code": "CONTRACT_VALIDATE_ERROR", "message": hex.EncodeToString([]byte("Smart contract is not exist.")),
		}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"result":          map[string]any{"result": true},
		"energy_used":     1008,
		"constant_result": []string{fmt.Sprintf("%064x", bal)},
		"transaction":     map[string]any{"ret": []any{map[string]any{}}, "visible": visible(p)},
	})
}

func (s *Sim) nowBlock(w http.ResponseWriter, solid bool) {
	s.mu.Lock()
	n, t := s.head, s.headTime
	if solid {
		n -= s.solidLag
		t = t.Add(-time.Duration(s.solidLag) * 3 * time.Second)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"blockID": fmt.Sprintf("%016x%048x", n, n),
		"block_header": map[string]any{
			"raw_data": map[string]any{
				"number":          n,
				"timestamp":       t.UnixMilli(),
				"txTrieRoot":      strings.Repeat("0", 64),
				"parentHash":      fmt.Sprintf("%016x%048x", n-1, n-1),
				"witness_address": "41" + strings.Repeat("0", 40),
				"version":         30,
			},
			"witness_signature": strings.Repeat("ab", 65),
		},
	})
}

// addrParam is the address in the request's field key; when it is not one,
// the answer java-tron gives (HTTP 200 with an Error) is written, and ok is
// false.
func addrParam(w http.ResponseWriter, p map[string]any, key string) (a chain.TronAddress, ok bool) {
	a, err := parseAddr(str(p, key))
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"Error": "class java.lang.IllegalArgumentException : invalid " + key})
		return a, false
	}
	return a, true
}

// parseAddr accepts the base58 and hex forms, as java-tron does.
func parseAddr(s string) (chain.TronAddress, error) {
	if strings.HasPrefix(s, "T") {
		return chain.ParseTronAddress(s)
	}
	return chain.TronAddressFromHex(s)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
