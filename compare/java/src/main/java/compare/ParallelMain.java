package compare;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * ParallelMain runs Confluent's Parallel Consumer with ProcessingOrder KEY
 * (or PARTITION) and maxConcurrency N over a pool of N JDBC connections:
 * each record is applied in its own database transaction, committed before
 * the user function returns; Parallel Consumer then commits the offsets
 * periodically (its default commit mode, PERIODIC_CONSUMER_ASYNCHRONOUS). A
 * failed transaction is rolled back and the function throws, so Parallel
 * Consumer retries the record. Every assignment is recorded as a claim (see
 * Claims).
 */
final class ParallelMain {
    static void run(Args a, boolean keyOrder) throws Exception {
        int n = a.getInt("concurrency");
        String member = a.get("member");
        BlockingQueue<Ledger> pool = new ArrayBlockingQueue<>(n);
        for (int i = 0; i < n; i++) {
            pool.add(new Ledger(DriverManager.getConnection(a.get("jdbc")), member, a.getInt("sleep-ms"), a.getInt("hold-ms")));
        }
        KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(Main.consumerProps(a));
        ParallelConsumerOptions<String, byte[]> options = ParallelConsumerOptions.<String, byte[]>builder()
                .ordering(keyOrder ? ProcessingOrder.KEY : ProcessingOrder.PARTITION)
                .maxConcurrency(n)
                .consumer(consumer)
                .build();
        ParallelStreamProcessor<String, byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);
        CountDownLatch stop = new CountDownLatch(1);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown();
            try {
                closed.await();
            } catch (InterruptedException ignored) {
            }
            System.out.println("stopped");
            System.out.flush();
        }));
        // The group generation at which each partition was assigned to this
        // instance, read on Parallel Consumer's poll thread (the consumer's
        // own thread) in the rebalance callback; never removed, so that a
        // record still in flight after its partition moved carries the
        // generation under which this instance was handed it.
        // Each assignment is also recorded as a claim at that generation, on
        // a connection of its own (see Claims).
        Map<Integer, Integer> gens = new ConcurrentHashMap<>();
        Connection claims = DriverManager.getConnection(a.get("jdbc"));
        claims.setAutoCommit(false);
        pc.subscribe(List.of(a.get("topic")), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                int gen = consumer.groupMetadata().generationId();
                for (TopicPartition tp : partitions) {
                    gens.put(tp.partition(), gen);
                }
                Claims.record(claims, member, partitions, gen);
            }
        });
        pc.poll(ctx -> {
            ConsumerRecord<String, byte[]> r = ctx.getSingleConsumerRecord();
            Ledger ledger;
            try {
                ledger = pool.take();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new RuntimeException(e);
            }
            try {
                ledger.apply(r, gens.getOrDefault(r.partition(), -1));
                ledger.connection().commit();
            } catch (SQLException | InterruptedException e) {
                try {
                    ledger.connection().rollback();
                } catch (SQLException ignored) {
                }
                throw new RuntimeException("apply " + r.partition() + "@" + r.offset() + ": " + e, e);
            } finally {
                pool.add(ledger);
            }
        });
        System.out.println("ready");
        System.out.flush();
        stop.await();
        pc.close();
        closed.countDown();
    }
}
