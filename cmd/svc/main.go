// Command svc is the custodial payment and ledger service: svc api, svc
// worker, svc admin, svc migrate and svc version.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "svc:", err)
		os.Exit(1)
	}
}
