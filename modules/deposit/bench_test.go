package deposit_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/deposit"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/dbtest"
)

// benchBatch is how many deposits one benchmark iteration settles.
const benchBatch = 200

// BenchmarkSettleDeposits measures settled deposits credited per second,
// end to end: the processor's signed InvoiceSettled webhook arrives at
// POST /webhooks/processor (signature checked, delivery stored, its job
// inserted), the ingress job hands it to the deposit module, which reads
// the invoice and its payments from the processor (the simulator, over
// loopback HTTP) and, in one transaction, records the payment, credits the
// ledger and writes the deposit.detected and deposit.settled events. The
// clock runs from the first webhook sent to the last deposit settled.
// "workers" is the River worker concurrency; webhooks are posted by 16
// concurrent senders. "reconcile" calls the reconcile directly (no
// ingress, no River) with that many goroutines, for comparison.
func BenchmarkSettleDeposits(b *testing.B) {
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("ingress/workers=%d", workers), func(b *testing.B) { benchSettle(b, workers, true) })
	}
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("reconcile/goroutines=%d", workers), func(b *testing.B) { benchSettle(b, workers, false) })
	}
}

func benchSettle(b *testing.B, workers int, viaIngress bool) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	b.Cleanup(sink.Close)
	opts := []option{withConfig(func(c *config.Config) {
		c.Worker.Concurrency = workers
		c.Database.MaxConns = workers + 16
		// The webhooks settle the deposits, not the poll: the poll that
		// runs when the worker starts settled most of the first batch
		// while it was being prepared, outside the timed part, and the
		// figures read low.
		c.Worker.DepositPollEvery = time.Hour
	})}
	if viaIngress {
		opts = append(opts, withWorker())
	}
	e := setup(b, opts...)
	e.Sim.SetWebhook(sink.URL, hookSecret) // recorded, signed, not yet delivered to the service
	var (
		total, selfCPU, dbCPU, backendsCPU time.Duration
		settled                            int
	)
	cpu := dbtest.CPU(b, e.App.DB)
	backends := dbtest.BackendsCPU(b, e.App.DB)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ids, hooks := prepareBatch(b, e)
		b.StartTimer()
		start := time.Now()
		self0, db0 := cpu()
		be0, _ := backends()
		if viaIngress {
			postAll(b, e.URL+"/webhooks/processor", hooks, 16)
			waitSettled(b, e, ids)
		} else {
			reconcileAll(b, e, ids, workers)
		}
		self1, db1 := cpu()
		be1, _ := backends()
		total += time.Since(start)
		selfCPU, dbCPU, backendsCPU = selfCPU+self1-self0, dbCPU+db1-db0, backendsCPU+be1-be0
		settled += len(ids)
	}
	b.StopTimer()
	b.ReportMetric(float64(settled)/total.Seconds(), "deposits/s")
	// Where each deposit's CPU goes: this process (the service, the
	// simulator and the benchmark's senders) and the database server.
	b.ReportMetric(float64(selfCPU.Microseconds())/1000/float64(settled), "go_cpu_ms/deposit")
	b.ReportMetric(float64(dbCPU.Microseconds())/1000/float64(settled), "db_cpu_ms/deposit")
	// The server's side alone: the benchmark's database's client backends,
	// not the server's shared processes and other databases' clients,
	// which db_cpu_ms counts (it means something only on a server the
	// benchmark has to itself).
	b.ReportMetric(float64(backendsCPU.Microseconds())/1000/float64(settled), "backends_cpu_ms/deposit")
}

// prepareBatch creates benchBatch deposits, pays and confirms each at the
// processor, and returns their ids and the signed InvoiceSettled deliveries
// the processor made for them.
func prepareBatch(b *testing.B, e *env) ([]uuid.UUID, []btcpaysim.Delivery) {
	ctx := context.Background()
	seen := len(e.Sim.Deliveries())
	ids := make([]uuid.UUID, 0, benchBatch)
	for i := range benchBatch {
		v, _, err := e.Svc.Create(ctx, deposit.CreateParams{ExternalUserID: fmt.Sprintf("bench-%d", i%50), Asset: "BTC",
			ExpectedAmount: ptr(int64(10000 + i))}, nil)
		require.NoError(b, err)
		inv, ok := e.Sim.InvoiceByOrderID(v.DepositID)
		require.True(b, ok)
		_, err = e.Sim.Pay(inv.ID, btcpaysim.PayParams{Settled: true})
		require.NoError(b, err)
		ids = append(ids, uuid.MustParse(v.DepositID))
	}
	var hooks []btcpaysim.Delivery
	deadline := time.Now().Add(time.Minute)
	for {
		hooks = hooks[:0]
		for _, d := range e.Sim.Deliveries()[seen:] {
			if d.Type == btcpay.EventInvoiceSettled {
				hooks = append(hooks, d)
			}
		}
		if len(hooks) == benchBatch && e.Sim.PendingWebhooks() == 0 {
			return ids, hooks
		}
		require.True(b, time.Now().Before(deadline), "the processor recorded %d of %d webhooks", len(hooks), benchBatch)
		time.Sleep(10 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// postAll sends the deliveries to the ingress with n concurrent senders,
// as BTCPay would (body and signature as recorded).
func postAll(b *testing.B, url string, hooks []btcpaysim.Delivery, n int) {
	work := make(chan btcpaysim.Delivery)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.Body))
				if err != nil {
					b.Error(err)
					continue
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(btcpay.SignatureHeader, d.Signature)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("ingress answered %d", resp.StatusCode)
				}
			}
		}()
	}
	for _, d := range hooks {
		work <- d
	}
	close(work)
	wg.Wait()
}

func waitSettled(b *testing.B, e *env, ids []uuid.UUID) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n, err := e.App.DB.Bun.NewSelect().Table("deposits").Where("id IN (?) AND status = 'settled'", bun.List(ids)).
			Count(context.Background())
		require.NoError(b, err)
		if int(n) == len(ids) {
			return
		}
		require.True(b, time.Now().Before(deadline), "%d of %d settled", n, len(ids))
		time.Sleep(5 * time.Millisecond)
	}
}

func reconcileAll(b *testing.B, e *env, ids []uuid.UUID, n int) {
	work := make(chan uuid.UUID)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := e.Svc.Reconcile(context.Background(), id); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}
