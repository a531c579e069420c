// Package concurrencytest starts a test's goroutines together, so that
// what it sends at once (requests, transactions) really races.
package concurrencytest

import "sync"

// AtOnce runs f(0) to f(n-1), each in a goroutine of its own, all started
// together, and returns when every one has returned.
func AtOnce(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}
