// Command pause waits for a signal: the real node's sandbox ("pause") container, and the container the
// real-node tests run, whose way of stopping they choose by its arguments.
//
//	pause                    exit 0 at SIGTERM or SIGINT
//	pause -term-delay 3s     at SIGTERM, take 3 s to stop, then exit 0 (a process that cleans up)
//	pause -ignore-term       never exit at SIGTERM (the kubelet's SIGKILL at the grace's end ends it)
//	pause -listen :8080      also answer 200 "ok" to every HTTP request there (a host's readiness probe)
//
// Each signal is written to standard output, so the container's log says what it received.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	delay := flag.Duration("term-delay", 0, "how long to take to stop after SIGTERM")
	ignore := flag.Bool("ignore-term", false, "ignore SIGTERM")
	listen := flag.String("listen", "", "an address to answer HTTP requests on")
	flag.Parse()
	if *listen != "" {
		go func() {
			ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
			fmt.Println("pause: listening on", *listen, http.ListenAndServe(*listen, ok))
			os.Exit(1)
		}()
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("pause: waiting")
	for received := range signals {
		if *ignore && received == syscall.SIGTERM {
			fmt.Println("pause: ignoring", received)
			continue
		}
		fmt.Println("pause: stopping on", received, "in", *delay)
		time.Sleep(*delay)
		fmt.Println("pause: stopped")
		os.Exit(0)
	}
}
