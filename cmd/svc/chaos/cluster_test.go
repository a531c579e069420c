package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/clustertest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/platformsim"
	"svc/platform/tron/tronsim"
)

const (
	processorSecret = "chaos-processor-secret"
	platformSecret  = "chaos-platform-secret"
)

// cluster is everything a run starts: the database, the simulators, the
// receiver, the load balancer and the svc processes.
type cluster struct {
	t       testing.TB
	dir     string // binary and logs
	bin     string
	pg      *dbtest.PrivateServer
	sim     *btcpaysim.Sim
	tron    *tronsim.Sim
	hot     chain.TronAddress
	recv    *receiver
	lb      *balancer
	apis    []*proc
	workers []*proc
	env     []string
	db      *db.DB // the oracle's own connection
	rwKey   string
	admKey  string
}

// scenarioDir is where a scenario test keeps its processes' logs: a
// temporary folder removed afterwards, or one kept (and named in the
// test's log) when CHAOS_KEEP is set.
func scenarioDir(t *testing.T) string {
	if testing.Short() {
		t.Skip("runs the whole service as separate processes")
	}
	if os.Getenv("CHAOS_KEEP") != "" {
		dir, err := os.MkdirTemp("", "svc-chaos-")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("logs in %s", dir)
		return dir
	}
	return t.TempDir()
}

// newDeposit creates a BTC deposit of 0.001 for user through the API and
// returns its id and the processor's invoice for it.
func (d *driver) newDeposit(t *testing.T, user string) (depositID, invoiceID string) {
	t.Helper()
	resp, ok := d.call(context.Background(), http.MethodPost, "/v1/deposits", map[string]any{"external_user_id": user, "asset": "BTC", "expected_amount": "100000"}, false)
	require.True(t, ok)
	require.Equal(t, http.StatusCreated, resp.status, string(resp.body))
	var dep struct {
		ID string `json:"deposit_id"`
	}
	require.NoError(t, resp.decode(&dep))
	inv, ok := d.c.sim.InvoiceByOrderID(dep.ID)
	require.True(t, ok)
	return dep.ID, inv.ID
}

// database starts the PostgreSQL of a run and returns the server the
// faults act on and the URLs of the schema owner (svc migrate), of the
// runtime role (every other svc process) and of the oracle (a superuser).
type database func(t testing.TB) (pg *dbtest.PrivateServer, owner, runtime, oracle string)

// oneServer is one private server, with the roles split as in production
// (docs/operations.md).
func oneServer(t testing.TB) (*dbtest.PrivateServer, string, string, string) {
	pg := dbtest.StartPrivateServer(t)
	owner, runtime := pg.Roles()
	return pg, owner, runtime, pg.URL
}

func startCluster(t testing.TB, dir string, env ...string) *cluster {
	return startClusterOn(t, dir, oneServer, env...)
}

func startClusterOn(t testing.TB, dir string, database database, env ...string) *cluster {
	c := &cluster{t: t, dir: dir, bin: clustertest.Build(t, dir)}
	pg, owner, runtime, oracleURL := database(t)
	c.pg = pg

	c.recv = newReceiver(platformSecret)
	recvURL := serve(t, c.recv)
	c.lb = &balancer{client: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	lbURL := serve(t, c.lb)

	c.tron = tronsim.Start(t)
	c.hot = chain.TronAddress(chaintest.Hash("chaos hot wallet")[:20])
	c.tron.SetTRXBalance(c.hot, 1_000_000_000)
	c.tron.SetUSDTBalance(c.hot, 1_000_000_000_000)
	sim, err := btcpaysim.New(btcpaysim.Options{WebhookURL: lbURL + "/webhooks/processor", WebhookSecret: processorSecret,
		TickEvery: time.Second, Log: fileLog(t, filepath.Join(dir, "simulator.log"))})
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	if err := sim.Listen("127.0.0.1:0"); err != nil {
		t.Fatalf("simulator: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	c.sim = sim

	c.env = append(os.Environ(),
		"DATABASE_URL="+runtime, "MIGRATE_DATABASE_URL="+owner, "DATABASE_MAX_CONNS=10", "SVC_ENV=development", "SVC_CONFIG_FILE=", "LOG_LEVEL=info",
		"BITCOIN_NETWORK=regtest", "LIGHTNING_ENABLED=true", "HTTP_LISTEN_HOST=127.0.0.1",
		"BTCPAY_URL="+sim.URL(), "BTCPAY_API_KEY="+sim.APIKey(), "BTCPAY_STORE_ID="+sim.StoreID(),
		"PROCESSOR_WEBHOOK_SECRET="+processorSecret, "BTCPAY_TIMEOUT=2s",
		"TRONGRID_URL="+c.tron.URL, "TRON_HOT_WALLET="+c.hot.String(), "USDT_POOL_ADDRESSES="+strings.Join(sim.TronPool(), ","),
		"PLATFORM_WEBHOOK_URL="+recvURL+"/webhooks", "PLATFORM_WEBHOOK_SECRET="+platformSecret, "PLATFORM_WEBHOOK_TIMEOUT=3s",
		"DEPOSIT_POLL_INTERVAL=3s", "WALLET_SCAN_INTERVAL=5s", "DISCOVERY_INTERVAL=20s", "PAYOUT_POLL_INTERVAL=2s",
		"WORKER_HEARTBEAT_INTERVAL=2s", "WORKER_STALE_AFTER=10s", "READYZ_CACHE_TTL=0s",
	)
	c.env = append(c.env, env...) // a test's own settings win: the last of a name is used
	c.svc("migrate")
	// Minting keys and setting limits are signed by an admin's key.
	c.env = append(c.env, "SVC_OPERATOR_KEY="+clustertest.OperatorKey(t, runtime, dir, "chaos"))
	c.rwKey = clustertest.LastLine(c.svc("admin", "keys", "mint", "--scope", "readwrite", "--label", "chaos platform"))
	c.admKey = clustertest.LastLine(c.svc("admin", "keys", "mint", "--scope", "admin", "--label", "chaos operator"))
	// Some withdrawals under the auto-approval limit, some above; no daily
	// cap, so the gate that decides is the one the driver chose.
	c.svc("admin", "assets", "set", "BTC", "--withdrawal-auto-limit", "200000", "--withdrawal-daily-cap", "100000000000")
	c.svc("admin", "assets", "set", "BTC_LN", "--withdrawal-auto-limit", "50000", "--withdrawal-daily-cap", "100000000000")

	for i := 0; i < 2; i++ {
		port := dbtest.FreePort(t)
		api := &proc{Name: fmt.Sprintf("api-%d", i+1), Bin: c.bin, Args: []string{"api"},
			Env: append(append([]string(nil), c.env...), "PORT="+strconv.Itoa(port)), Log: filepath.Join(dir, fmt.Sprintf("api-%d.log", i+1)),
			Ready: fmt.Sprintf("http://127.0.0.1:%d/healthz", port)}
		c.apis = append(c.apis, api)
		c.lb.backends = append(c.lb.backends, fmt.Sprintf("http://127.0.0.1:%d", port))
		c.workers = append(c.workers, &proc{Name: fmt.Sprintf("worker-%d", i+1), Bin: c.bin, Args: []string{"worker"},
			Env: c.env, Log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", i+1))})
	}
	for _, p := range c.procs() {
		if err := p.Start(); err != nil {
			t.Fatalf("start %s: %v", p.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range c.procs() {
			p.Stop()
		}
	})
	for _, p := range c.apis {
		if err := p.WaitReady(30 * time.Second); err != nil {
			t.Fatalf("%s: %v (log: %s)", p.Name, err, p.Log)
		}
	}
	c.lb.url = lbURL
	d, err := db.Open(context.Background(), oracleURL, 4)
	if err != nil {
		t.Fatalf("oracle connection: %v", err)
	}
	t.Cleanup(d.Close)
	c.db = d
	return c
}

func (c *cluster) procs() []*proc { return append(append([]*proc(nil), c.apis...), c.workers...) }

// svc runs a one-shot svc command and returns its output.
func (c *cluster) svc(args ...string) string {
	c.t.Helper()
	return clustertest.Run(c.t, c.bin, c.env, args...)
}

// fileLog is a logger writing to path (the simulator's log).
func fileLog(t testing.TB, path string) *slog.Logger {
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return slog.New(slog.NewTextHandler(f, nil))
}

// serve runs h on a loopback port for the test and returns its URL.
func serve(t testing.TB, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// proc is one svc process that can be killed and started again.
type proc = clustertest.Proc

// balancerHeader marks an answer of the balancer itself (no backend could
// be reached, or the backend died mid-request), which a client treats as a
// network error and retries.
const balancerHeader = "X-Chaos-Balancer"

// balancer spreads requests over the api processes, skipping one that
// refuses connections, as a load balancer with health checks does.
type balancer struct {
	url      string
	backends []string
	next     atomic.Uint64
	client   *http.Client
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.Header().Set(balancerHeader, "read")
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	start := b.next.Add(1)
	for i := range b.backends {
		target := b.backends[(int(start)+i)%len(b.backends)]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			continue
		}
		req.Header = r.Header.Clone()
		resp, err := b.client.Do(req)
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				continue // nothing listens there: the next one
			}
			w.Header().Set(balancerHeader, "lost")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	w.Header().Set(balancerHeader, "none")
	w.WriteHeader(http.StatusServiceUnavailable)
}

// receiver is the platform's webhook receiver (platformsim), which can be
// taken down, and which counts deliveries whose signature did not verify.
type receiver struct {
	*platformsim.Receiver
	down       atomic.Bool
	badSig     atomic.Int64
	deliveries atomic.Int64
	// hold, when set, keeps each delivery open, unanswered and unrecorded,
	// until its sender gives up or goes away (a worker killed mid-delivery).
	hold atomic.Bool
	held atomic.Int64 // deliveries being held now
}

func newReceiver(secret string) *receiver { return &receiver{Receiver: platformsim.New(secret)} }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/webhooks" {
		if r.down.Load() {
			http.Error(w, "receiver down", http.StatusServiceUnavailable)
			return
		}
		if r.hold.Load() {
			r.held.Add(1)
			defer r.held.Add(-1)
			<-req.Context().Done()
			return
		}
		r.deliveries.Add(1)
		sw := &statusWriter{ResponseWriter: w}
		r.Receiver.ServeHTTP(sw, req)
		if sw.status == http.StatusUnauthorized {
			r.badSig.Add(1)
		}
		return
	}
	r.Receiver.ServeHTTP(w, req)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }
