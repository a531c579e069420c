// Package tronsim is a TRON node simulator for the calls platform/tron
// makes: transactions with their receipts and TRC-20 Transfer events, TRX
// and token balances, and the latest and solidified blocks, on the same
// java-tron paths and with the same JSON shapes as TronGrid. Tests drive it
// with Go methods; a local run drives it over its /sim/ control API.
//
// A Sim is an http.Handler serving the node paths (/wallet/...,
// /walletsolidity/...) and /sim/ at its root: mount it on its own listener,
// or under a prefix with http.StripPrefix. Start runs one on a loopback
// listener for a test.
package tronsim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"svc/platform/chain"
)

// DefaultUSDTContract is the mainnet USDT contract, the service's default.
var DefaultUSDTContract = mustTron("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")

// Mode is how the simulated node answers.
type Mode int

// The modes.
const (
	Up          Mode = iota // answers normally
	Errors                  // every node call gets 503
	Drop                    // connections are closed without an answer
	Hang                    // calls get no answer until the client gives up
	RateLimited             // every node call gets TronGrid's 403 "frequency limit"
)

// Log is one TRC-20 Transfer event of a simulated transaction.
type Log struct {
	Contract chain.TronAddress // zero: the USDT contract
	From, To chain.TronAddress
	Amount   int64
}

// Tx is a simulated transaction.
type Tx struct {
	ID string // 64 hex digits; empty: a fresh one
	// Owner signed it; zero: the From of the first log.
	Owner chain.TronAddress
	// Contract is the contract called; zero: the USDT contract.
	Contract chain.TronAddress
	Logs     []Log
	// Result is the VM result; empty means SUCCESS. Any other value
	// ("REVERT", "OUT_OF_ENERGY") fails the transaction: it emits no events.
	Result string
	// Pending leaves it broadcast but not in a block until Confirm.
	Pending bool
	FeeSun  int64
}

type simTx struct {
	Tx
	block     int64
	blockTime time.Time
}

// Sim is the simulated node. Its zero value is not usable; call New.
type Sim struct {
	// URL is the base URL when the Sim was started with Start.
	URL string

	mu       sync.Mutex
	usdt     chain.TronAddress
	apiKey   string
	now      func() time.Time
	solidLag int64
	head     int64
	headTime time.Time
	txs      map[string]*simTx
	trx      map[chain.TronAddress]int64
	tokens   map[[2]chain.TronAddress]int64 // (contract, holder) -> balance
	mode     Mode
	calls    map[string]int
	lastKey  string
}

// Option configures a Sim.
type Option func(*Sim)

// WithUSDTContract sets the contract AddUSDTTransfer and SetUSDTBalance use.
func WithUSDTContract(a chain.TronAddress) Option { return func(s *Sim) { s.usdt = a } }

// WithAPIKey makes node calls without this TRON-PRO-API-KEY get 401.
func WithAPIKey(key string) Option { return func(s *Sim) { s.apiKey = key } }

// WithClock sets the clock that stamps new blocks.
func WithClock(now func() time.Time) Option { return func(s *Sim) { s.now = now } }

// WithSolidLag sets how many blocks the solidified head trails the latest
// (java-tron: 19 of 27 witnesses, about a minute).
func WithSolidLag(n int64) Option { return func(s *Sim) { s.solidLag = n } }

// New returns a simulated node at block 70,000,000.
func New(opts ...Option) *Sim {
	s := &Sim{
		usdt:     DefaultUSDTContract,
		now:      func() time.Time { return time.Now().UTC() },
		solidLag: 19,
		head:     70_000_000,
		txs:      map[string]*simTx{},
		trx:      map[chain.TronAddress]int64{},
		tokens:   map[[2]chain.TronAddress]int64{},
		calls:    map[string]int{},
	}
	for _, o := range opts {
		o(s)
	}
	s.headTime = s.now()
	return s
}

// TB is the part of testing.TB that Start needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start runs a new Sim on a loopback listener until the test ends.
func Start(t TB, opts ...Option) *Sim {
	t.Helper()
	s := New(opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tronsim: listen: %v", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.URL = "http://" + ln.Addr().String()
	return s
}

// AddTx records a transaction and, unless it is pending, puts it in a new
// block. It returns the transaction id.
func (s *Sim) AddTx(tx Tx) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.ID == "" {
		tx.ID = randomTxID()
	}
	if tx.Contract.IsZero() {
		tx.Contract = s.usdt
	}
	for i := range tx.Logs {
		if tx.Logs[i].Amount < 0 {
			panic("tronsim: a TRC-20 amount cannot be negative")
		}
		if tx.Logs[i].Contract.IsZero() {
			tx.Logs[i].Contract = s.usdt
		}
	}
	if tx.Owner.IsZero() && len(tx.Logs) > 0 {
		tx.Owner = tx.Logs[0].From
	}
	st := &simTx{Tx: tx}
	if !tx.Pending {
		s.mineLocked(1)
		st.block, st.blockTime = s.head, s.headTime
	}
	s.txs[tx.ID] = st
	return tx.ID
}

// AddUSDTTransfer records a direct USDT transfer from one address to
// another, successful or reverted, in a new block. An empty txid gets a
// fresh one; the id is returned.
func (s *Sim) AddUSDTTransfer(txid string, from, to chain.TronAddress, amount int64, success bool) string {
	tx := Tx{ID: txid, Owner: from, Logs: []Log{{From: from, To: to, Amount: amount}}}
	if !success {
		tx.Result = "REVERT"
	}
	return s.AddTx(tx)
}

// Confirm puts a pending transaction in a new block.
func (s *Sim) Confirm(txid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.txs[txid]
	if !ok || !st.Pending {
		return false
	}
	s.mineLocked(1)
	st.Pending, st.block, st.blockTime = false, s.head, s.headTime
	return true
}

// MineBlocks adds n empty blocks and returns the new head.
func (s *Sim) MineBlocks(n int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mineLocked(n)
	return s.head
}

// Head returns the latest and the solidified block numbers.
func (s *Sim) Head() (latest, solid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head, s.head - s.solidLag
}

func (s *Sim) mineLocked(n int) {
	for range n {
		s.head++
		t := s.now()
		if !t.After(s.headTime) {
			t = s.headTime.Add(3 * time.Second) // TRON's block interval
		}
		s.headTime = t
	}
}

// SetTRXBalance sets the TRX balance of addr, in sun. An address never set
// is a never-activated account.
func (s *Sim) SetTRXBalance(addr chain.TronAddress, sun int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trx[addr] = sun
}

// SetUSDTBalance sets the USDT balance of addr, in the token's smallest units.
func (s *Sim) SetUSDTBalance(addr chain.TronAddress, units int64) {
	s.SetTokenBalance(s.usdt, addr, units)
}

// SetTokenBalance sets the balance of addr at a TRC-20 contract.
func (s *Sim) SetTokenBalance(contract, addr chain.TronAddress, units int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[[2]chain.TronAddress{contract, addr}] = units
}

// Forget drops a transaction, as a node does when the block that held it
// is reorganised away and it is never re-included.
func (s *Sim) Forget(txid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.txs, strings.ToLower(txid))
}

// SetMode changes how the node answers; Up brings it back.
func (s *Sim) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// Calls returns how many requests reached path (e.g.
// "/wallet/gettransactioninfobyid"), whatever the mode.
func (s *Sim) Calls(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[path]
}

// LastAPIKey returns the TRON-PRO-API-KEY header of the last node call.
func (s *Sim) LastAPIKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastKey
}

func randomTxID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("tronsim: random: %v", err))
	}
	return hex.EncodeToString(b[:])
}

func mustTron(s string) chain.TronAddress {
	a, err := chain.ParseTronAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}
