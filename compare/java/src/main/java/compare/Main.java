package compare;

import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Main runs one consumer instance of the comparison:
 *
 * <pre>
 * java -cp … compare.Main pc-key|pc-partition|plain --brokers=… --topic=… --group=…
 *     --jdbc=jdbc:postgresql://…?currentSchema=… --member=NAME --concurrency=N --sleep-ms=0 --hold-ms=0 --session-ms=6000
 * </pre>
 *
 * It prints "ready" once subscribed and "stopped" after a clean close on SIGTERM.
 */
public final class Main {
    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: compare.Main pc-key|pc-partition|plain --name=value…");
            System.exit(2);
        }
        Args a = new Args(argv, 1);
        switch (argv[0]) {
            case "pc-key" -> ParallelMain.run(a, true);
            case "pc-partition" -> ParallelMain.run(a, false);
            case "plain" -> PlainMain.run(a);
            default -> {
                System.err.println("unknown system " + argv[0]);
                System.exit(2);
            }
        }
    }

    /** consumerProps are the settings both programs share: classic protocol, no auto-commit. */
    static Properties consumerProps(Args a) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("brokers"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, a.get("group"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, a.get("member"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, a.get("session-ms"));
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(Integer.parseInt(a.get("session-ms")) / 3));
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }
}
