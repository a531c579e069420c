package svcsdk_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	svcsdk "svc/sdk/go"
)

// A deposit, a balance and a webhook receiver: the README's hello world.
func Example() {
	// hello:start
	ctx := context.Background()
	// Retrying resends with the same Idempotency-Key after a network error, a 409 in flight or a 5xx.
	c, err := svcsdk.New("http://localhost:8080", os.Getenv("SVC_API_KEY"), svcsdk.WithHTTPClient(&svcsdk.Retrying{}))
	if err != nil {
		log.Fatal(err)
	}
	user := "alice"
	dep, err := c.CreateDepositWithResponse(ctx, &svcsdk.CreateDepositParams{IdempotencyKey: svcsdk.NewIdempotencyKey()},
		svcsdk.CreateDepositJSONRequestBody{ExternalUserId: &user, Asset: "BTC"})
	if err != nil {
		log.Fatal(err)
	} else if dep.JSON201 == nil {
		log.Fatal(dep.Status(), string(dep.Body)) // dep.JSON402, JSON422, JSON503...: the typed error bodies
	}
	fmt.Println("pay to", *dep.JSON201.Address)

	bal, err := c.GetUserBalancesWithResponse(ctx, user)
	if err != nil || bal.JSON200 == nil {
		log.Fatal(err, bal)
	}
	fmt.Println(bal.JSON200.Balances)

	// The webhook receiver: the raw body's bytes, verified before anything else.
	http.HandleFunc("/webhooks", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := svcsdk.VerifyWebhook([]byte(os.Getenv("PLATFORM_WEBHOOK_SECRET")), r.Header.Get(svcsdk.WebhookSignatureHeader), body, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// deduplicate on the event's id, re-read the resource, answer 200
	})
	// hello:end
}
