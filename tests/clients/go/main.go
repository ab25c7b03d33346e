// The franz-go client scenario run through the proxy by tests/integration/test_franz_go_client.py:
//
//	franz-client -bootstrap host:port -prefix name -compression snappy
//
// Admin create + describe configs, compressed produce, a two-member consumer group through a
// rebalance, committed offsets re-read. Prints "OK ..." on success, exits 1 with the reason.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	records    = 300
	partitions = 3
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func codec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	case "snappy":
		return kgo.SnappyCompression()
	}
	return kgo.NoCompression()
}

func member(bootstrap, group, topic string) *kgo.Client {
	c, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(10*time.Second))
	if err != nil {
		fail("consumer: %v", err)
	}
	return c
}

func poll(ctx context.Context, c *kgo.Client, seen map[string]bool) {
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	fs := c.PollFetches(pctx)
	fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
}

func main() {
	bootstrap := flag.String("bootstrap", "", "bootstrap servers")
	prefix := flag.String("prefix", "franz", "topic/group prefix")
	compression := flag.String("compression", "snappy", "gzip|lz4|zstd|snappy")
	flag.Parse()
	topic, group := *prefix+"-topic", *prefix+"-group"
	ctx := context.Background()

	cl, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.ProducerBatchCompression(codec(*compression)))
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, partitions, 3, nil, topic); err != nil {
		fail("create topic: %v", err)
	}
	// The new topic may not have reached every broker's metadata yet (same direct): retry.
	var rc kadm.ResourceConfig
	for until := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err == nil {
			rc, err = rcs.On(topic, nil)
		}
		if err == nil && rc.Err == nil {
			break
		}
		if time.Now().After(until) {
			fail("describe configs of %s: %v %v", topic, err, rc.Err)
		}
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() == "delete" {
			found = true
		}
	}
	if !found {
		fail("cleanup.policy=delete not in described configs")
	}

	var rs []*kgo.Record
	for i := 0; i < records; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s-%d", *prefix, i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		fail("produce: %v", err)
	}

	seen := map[string]bool{}
	c1 := member(*bootstrap, group, topic)
	defer c1.Close()
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 100 && time.Now().Before(deadline) {
		poll(ctx, c1, seen)
	}
	if len(seen) < 100 {
		fail("first member consumed %d records within 60s", len(seen))
	}
	if err := c1.CommitUncommittedOffsets(ctx); err != nil {
		fail("commit: %v", err)
	}
	c2 := member(*bootstrap, group, topic)
	defer c2.Close()
	rebalanced := false
	deadline = time.Now().Add(90 * time.Second)
	for (len(seen) < records || !rebalanced) && time.Now().Before(deadline) {
		poll(ctx, c1, seen)
		poll(ctx, c2, seen)
		described, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			g := described[group]
			withPartitions := 0
			for _, m := range g.Members {
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range a.Topics {
						if len(t.Partitions) > 0 {
							withPartitions++
						}
					}
				}
			}
			rebalanced = len(g.Members) == 2 && withPartitions == 2
		}
	}
	if !rebalanced {
		fail("second member never got partitions through a rebalance")
	}
	if len(seen) != records {
		fail("group consumed %d of %d records", len(seen), records)
	}

	// Settle: poll and commit until the group's committed offsets reach the end offsets.
	var committedSum int64
	ok := false
	deadline = time.Now().Add(60 * time.Second)
	for !ok && time.Now().Before(deadline) {
		for _, c := range []*kgo.Client{c1, c2} {
			poll(ctx, c, seen)
			_ = c.CommitUncommittedOffsets(ctx)
		}
		committed, err := adm.FetchOffsets(ctx, group)
		ends, err2 := adm.ListEndOffsets(ctx, topic)
		if err != nil || err2 != nil {
			continue
		}
		ok, committedSum = true, 0
		ends.Each(func(e kadm.ListedOffset) {
			c, found := committed.Lookup(topic, e.Partition)
			if !found || c.At != e.Offset {
				ok = false
			}
			committedSum += c.At
		})
	}
	if !ok || committedSum != records {
		fail("committed offsets did not reach the end offsets (sum %d of %d)", committedSum, records)
	}
	fmt.Printf("OK records=%d rebalanced=%v committed=%d\n", len(seen), rebalanced, committedSum)
}
