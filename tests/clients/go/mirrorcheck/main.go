// What a franz-go client sees of a mirror topic through the proxy; run by
// tests/integration/test_mirror_clients.py (same output as tests/clients/java/MirrorCheck.java):
//
//	mirror-check consume <bootstrap> <topic> <partitions> <read_committed|read_uncommitted> <expected records>
//	mirror-check produce <bootstrap> <topic>
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func show(b []byte) string {
	if b == nil {
		return "-"
	}
	if len(b) == 0 {
		return "_"
	}
	return hex.EncodeToString(b)
}

func main() {
	mode, bootstrap, topic := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	if mode == "produce" {
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
		if err != nil {
			fmt.Println("E 0 client:", err)
			return
		}
		defer cl.Close()
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r, err := cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).First()
		if err != nil {
			fmt.Printf("E %d %v\n", time.Since(t0).Milliseconds(), err)
			return
		}
		fmt.Printf("OK %d\n", r.Offset)
		return
	}
	partitions, _ := strconv.Atoi(os.Args[4])
	level := kgo.ReadUncommitted()
	if os.Args[5] == "read_committed" {
		level = kgo.ReadCommitted()
	}
	offsets := map[int32]kgo.Offset{}
	for p := 0; p < partitions; p++ {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.FetchIsolationLevel(level),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer cl.Close()
	expected, _ := strconv.Atoi(os.Args[6])
	seen := 0
	for deadline := time.Now().Add(60 * time.Second); seen < expected && time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			fmt.Printf("R %d %d %s %s\n", r.Partition, r.Offset, show(r.Key), show(r.Value))
		})
	}
}
