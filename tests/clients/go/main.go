// The franz-go client scenario run through the proxy by tests/integration/test_franz_go_client.py
// (and over TLS/SASL by tests/tls):
//
//	franz-client -bootstrap host:port -prefix name -compression snappy
//	    [-replication 3] [-txn]
//	    [-tls-ca ca.pem [-tls-cert c.pem -tls-key c.key] [-tls-server-name host]]
//	    [-sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 -sasl-user u -sasl-password p]
//
// Admin create + describe configs, compressed produce, a two-member consumer group through a
// rebalance, committed offsets re-read; with -txn also a transactional producer that commits,
// aborts and commits again, read back read_committed and read_uncommitted. Prints "OK ..." on
// success, exits 1 with the reason. -tls-ca or -tls-cert turns TLS on.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
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

// security turns the TLS and SASL flags into client options (none when no flag is set).
func security(tlsCA, tlsCert, tlsKey, tlsServerName, mechanism, user, password string) []kgo.Opt {
	var opts []kgo.Opt
	if tlsCA != "" || tlsCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: tlsServerName}
		if tlsCA != "" {
			pem, err := os.ReadFile(tlsCA)
			if err != nil {
				fail("read -tls-ca: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				fail("no certificate in -tls-ca %s", tlsCA)
			}
		}
		if tlsCert != "" {
			pair, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
			if err != nil {
				fail("load -tls-cert/-tls-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	switch strings.ToUpper(mechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	default:
		fail("unknown -sasl-mechanism %q (PLAIN|SCRAM-SHA-256|SCRAM-SHA-512)", mechanism)
	}
	return opts
}

func member(bootstrap, group, topic string, sec []kgo.Opt) *kgo.Client {
	opts := append([]kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(10 * time.Second)}, sec...)
	c, err := kgo.NewClient(opts...)
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

// transactions commits 10 records, aborts 10 and commits 5 more (spread over two partitions, so
// each partition ends with committed records), then reads the topic back with both isolation
// levels; returns how many records each saw.
func transactions(ctx context.Context, bootstrap string, sec []kgo.Opt, adm *kadm.Client, prefix string, replication int16) (int, int) {
	topic := prefix + "-txn"
	if _, err := adm.CreateTopic(ctx, 2, replication, nil, topic); err != nil {
		fail("create topic %s: %v", topic, err)
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.TransactionalID(prefix + "-tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, sec...)
	tx, err := kgo.NewClient(opts...)
	if err != nil {
		fail("transactional client: %v", err)
	}
	defer tx.Close()
	batch := func(from, to int, value string, end kgo.TransactionEndTry) {
		if err := tx.BeginTransaction(); err != nil {
			fail("begin transaction: %v", err)
		}
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(fmt.Sprintf("%s-%d", value, i))})
		}
		if err := tx.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			fail("transactional produce: %v", err)
		}
		if err := tx.EndTransaction(ctx, end); err != nil {
			fail("end transaction (commit=%v): %v", end, err)
		}
	}
	batch(0, 10, "committed", kgo.TryCommit)
	batch(0, 10, "aborted", kgo.TryAbort)
	batch(10, 15, "committed", kgo.TryCommit)

	read := func(level kgo.IsolationLevel, want int) []string {
		opts := append([]kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level)}, sec...)
		c, err := kgo.NewClient(opts...)
		if err != nil {
			fail("reader: %v", err)
		}
		defer c.Close()
		var got []string
		// Both partitions end with committed records: once every one of them is read, nothing
		// (aborted or not) can still be ahead of the reader.
		for deadline := time.Now().Add(30 * time.Second); len(got) < want && time.Now().Before(deadline); {
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			c.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			cancel()
		}
		return got
	}
	committed := read(kgo.ReadCommitted(), 15)
	for _, v := range committed {
		if !strings.HasPrefix(v, "committed-") {
			fail("read_committed returned %q (all: %v)", v, committed)
		}
	}
	if len(committed) != 15 {
		fail("read_committed saw %d records, want the 15 committed ones: %v", len(committed), committed)
	}
	all := read(kgo.ReadUncommitted(), 25)
	if len(all) != 25 {
		fail("read_uncommitted saw %d records, want 25 (committed and aborted)", len(all))
	}
	return len(committed), len(all)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "bootstrap servers")
	prefix := flag.String("prefix", "franz", "topic/group prefix")
	compression := flag.String("compression", "snappy", "gzip|lz4|zstd|snappy")
	replication := flag.Int("replication", 3, "replication factor of the topics it creates")
	txn := flag.Bool("txn", false, "also run the transactional part (commit, abort, read_committed)")
	tlsCA := flag.String("tls-ca", "", "PEM CA bundle to verify the brokers with (turns TLS on)")
	tlsCert := flag.String("tls-cert", "", "PEM client certificate (turns TLS on)")
	tlsKey := flag.String("tls-key", "", "PEM private key of -tls-cert")
	tlsServerName := flag.String("tls-server-name", "", "name to verify the brokers' certificates against (default: the dialed host)")
	saslMechanism := flag.String("sasl-mechanism", "", "PLAIN|SCRAM-SHA-256|SCRAM-SHA-512")
	saslUser := flag.String("sasl-user", "", "SASL username")
	saslPassword := flag.String("sasl-password", "", "SASL password")
	flag.Parse()
	topic, group := *prefix+"-topic", *prefix+"-group"
	ctx := context.Background()
	sec := security(*tlsCA, *tlsCert, *tlsKey, *tlsServerName, *saslMechanism, *saslUser, *saslPassword)

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(*bootstrap), kgo.ProducerBatchCompression(codec(*compression))}, sec...)...)
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, partitions, int16(*replication), nil, topic); err != nil {
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
	c1 := member(*bootstrap, group, topic, sec)
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
	c2 := member(*bootstrap, group, topic, sec)
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
	txnSummary := ""
	if *txn {
		committedTxn, allTxn := transactions(ctx, *bootstrap, sec, adm, *prefix, int16(*replication))
		txnSummary = fmt.Sprintf(" txn_committed=%d txn_uncommitted=%d", committedTxn, allTxn)
	}
	fmt.Printf("OK records=%d rebalanced=%v committed=%d%s\n", len(seen), rebalanced, committedSum, txnSummary)
}
