package compare;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;

/**
 * PlainMain is the consumer most people write by hand: N threads, each with
 * its own KafkaConsumer in the group and its own JDBC connection; each poll's
 * records are applied in one database transaction, then their offsets are
 * committed with commitSync. A failed commit (the partitions moved during the
 * batch) is logged and the loop goes on, as the client's documentation
 * suggests; the records are then delivered again to their new owner. Every
 * assignment is recorded as a claim (see Claims).
 */
final class PlainMain {
    static void run(Args a) throws Exception {
        int n = a.getInt("concurrency");
        String member = a.get("member");
        List<Thread> threads = new ArrayList<>();
        List<KafkaConsumer<String, byte[]>> consumers = new ArrayList<>();
        CountDownLatch done = new CountDownLatch(n);
        for (int i = 0; i < n; i++) {
            KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(Main.consumerProps(a));
            consumers.add(c);
            Connection conn = DriverManager.getConnection(a.get("jdbc"));
            Ledger ledger = new Ledger(conn, member, a.getInt("sleep-ms"), a.getInt("hold-ms"));
            Thread t = new Thread(() -> {
                try {
                    loop(c, ledger, member, a.get("topic"));
                } catch (Exception e) {
                    System.err.println("plain consumer thread failed: " + e);
                    e.printStackTrace();
                } finally {
                    try {
                        c.close(Duration.ofSeconds(5));
                    } catch (Exception e) {
                        System.err.println("close: " + e);
                    }
                    done.countDown();
                }
            }, member + "-" + i);
            threads.add(t);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumers.forEach(KafkaConsumer::wakeup);
            try {
                done.await();
            } catch (InterruptedException ignored) {
            }
            System.out.println("stopped");
            System.out.flush();
        }));
        threads.forEach(Thread::start);
        System.out.println("ready");
        System.out.flush();
        for (Thread t : threads) {
            t.join();
        }
    }

    private static void loop(KafkaConsumer<String, byte[]> c, Ledger ledger, String member, String topic) throws Exception {
        // Each assignment is recorded as a claim at the generation it came
        // with, on this thread's connection: the callback runs inside poll,
        // between two batches, so no transaction is open on it.
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                Claims.record(ledger.connection(), member, partitions, c.groupMetadata().generationId());
            }
        });
        try {
            while (true) {
                ConsumerRecords<String, byte[]> recs = c.poll(Duration.ofMillis(100));
                if (recs.isEmpty()) {
                    continue;
                }
                applyBatch(ledger, recs, c.groupMetadata().generationId());
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, byte[]> r : recs) {
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                try {
                    c.commitSync(offsets);
                } catch (WakeupException e) {
                    throw e;
                } catch (KafkaException e) {
                    System.err.println("commit failed, the records will be delivered again: " + e);
                }
            }
        } catch (WakeupException e) {
            // shutdown
        }
    }

    private static void applyBatch(Ledger ledger, ConsumerRecords<String, byte[]> recs, int gen) throws InterruptedException {
        Connection conn = ledger.connection();
        for (int attempt = 1; ; attempt++) {
            try {
                for (ConsumerRecord<String, byte[]> r : recs) {
                    ledger.apply(r, gen);
                }
                conn.commit();
                return;
            } catch (SQLException e) {
                try {
                    conn.rollback();
                } catch (SQLException ignored) {
                }
                if (!Ledger.uniqueViolation(e)) {
                    System.err.println("batch failed (attempt " + attempt + "), retrying: " + e);
                    Thread.sleep(100);
                }
            }
        }
    }
}
