package compare;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * Ledger applies one ledger command (examples/ledger) on a JDBC connection
 * inside the caller's transaction: the same statements as the Go example's
 * handlers (deposit: upsert the balance; withdraw: open the account, then
 * the overdraft rule in one UPDATE; one posting per command, keyed by its
 * Kafka position), preceded by the most favourable deduplication this side
 * can have: a command whose posting exists already is not applied again,
 * and is recorded as a duplicate delivery. The posting's primary key backs
 * the check up: two instances racing on one offset make one transaction fail
 * with a unique violation, which the caller rolls back and retries, and the
 * retry finds the posting.
 *
 * Every call also writes one compare_effects row (the harness's audit and
 * latency row) in the same transaction.
 */
final class Ledger {
    static final String DEPOSIT_SQL = "INSERT INTO ledger_accounts (account, balance) VALUES (?, ?) "
            + "ON CONFLICT (account) DO UPDATE SET balance = ledger_accounts.balance + excluded.balance";
    static final String OPEN_ACCOUNT_SQL = "INSERT INTO ledger_accounts (account, balance) VALUES (?, 0) "
            + "ON CONFLICT (account) DO NOTHING";
    static final String WITHDRAW_SQL = "UPDATE ledger_accounts SET balance = balance - ? WHERE account = ? AND balance >= ?";
    static final String POST_SQL = "INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member, topic_id) "
            + "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '')";
    static final String EXISTS_SQL = "SELECT 1 FROM ledger_postings WHERE topic_id = '' AND topic = ? AND part = ? AND off = ?";
    static final String EFFECT_SQL = "INSERT INTO compare_effects (part, off, member, gen, dup, produced_ms) VALUES (?, ?, ?, ?, ?, ?)";

    private static final Pattern ID = Pattern.compile("\"id\"\\s*:\\s*\"([^\"]*)\"");
    private static final Pattern SEQ = Pattern.compile("\"seq\"\\s*:\\s*(-?\\d+)");
    private static final Pattern AMOUNT = Pattern.compile("\"amount\"\\s*:\\s*(-?\\d+)");

    private final Connection conn;
    private final String member;
    private final int sleepMs, holdMs;
    private final PreparedStatement deposit, open, withdraw, post, exists, effect;

    /**
     * sleepMs is how long apply sleeps before the ledger's effect; holdMs,
     * after it, in the transaction, holding its row locks.
     */
    Ledger(Connection conn, String member, int sleepMs, int holdMs) throws SQLException {
        this.conn = conn;
        this.member = member;
        this.sleepMs = sleepMs;
        this.holdMs = holdMs;
        conn.setAutoCommit(false);
        deposit = conn.prepareStatement(DEPOSIT_SQL);
        open = conn.prepareStatement(OPEN_ACCOUNT_SQL);
        withdraw = conn.prepareStatement(WITHDRAW_SQL);
        post = conn.prepareStatement(POST_SQL);
        exists = conn.prepareStatement(EXISTS_SQL);
        effect = conn.prepareStatement(EFFECT_SQL);
    }

    Connection connection() {
        return conn;
    }

    /**
     * Applies r inside the connection's current transaction; the caller
     * commits. gen is the group generation under which this instance holds
     * r's partition, as far as it knows.
     */
    void apply(ConsumerRecord<String, byte[]> r, int gen) throws SQLException, InterruptedException {
        if (sleepMs > 0) {
            Thread.sleep(sleepMs);
        }
        exists.setString(1, r.topic());
        exists.setInt(2, r.partition());
        exists.setLong(3, r.offset());
        boolean dup;
        try (ResultSet rs = exists.executeQuery()) {
            dup = rs.next();
        }
        if (!dup) {
            String type = header(r, "workrouter-type");
            String body = new String(r.value(), StandardCharsets.UTF_8);
            String id = group(ID, body);
            int seq = Integer.parseInt(group(SEQ, body));
            long amount = Long.parseLong(group(AMOUNT, body));
            String account = r.key();
            String kind;
            if ("deposit".equals(type)) {
                deposit.setString(1, account);
                deposit.setLong(2, amount);
                deposit.executeUpdate();
                kind = "deposit";
            } else if ("withdraw".equals(type)) {
                open.setString(1, account);
                open.executeUpdate();
                withdraw.setLong(1, amount);
                withdraw.setString(2, account);
                withdraw.setLong(3, amount);
                kind = withdraw.executeUpdate() == 0 ? "refused" : "withdraw";
            } else {
                throw new IllegalStateException("no handler for type " + type + " at " + r.partition() + "@" + r.offset());
            }
            post.setString(1, r.topic());
            post.setInt(2, r.partition());
            post.setLong(3, r.offset());
            post.setString(4, account);
            post.setString(5, id);
            post.setInt(6, seq);
            post.setString(7, kind);
            post.setLong(8, amount);
            post.setInt(9, gen);
            post.setString(10, member);
            post.executeUpdate();
        }
        if (holdMs > 0) {
            Thread.sleep(holdMs);
        }
        effect.setInt(1, r.partition());
        effect.setLong(2, r.offset());
        effect.setString(3, member);
        effect.setLong(4, gen);
        effect.setBoolean(5, dup);
        effect.setLong(6, r.timestamp());
        effect.executeUpdate();
    }

    /** Whether e is PostgreSQL's unique violation (two instances applied one offset at once). */
    static boolean uniqueViolation(SQLException e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SQLException s && "23505".equals(s.getSQLState())) {
                return true;
            }
        }
        return false;
    }

    private static String header(ConsumerRecord<String, byte[]> r, String name) {
        Header h = r.headers().lastHeader(name);
        return h == null ? "" : new String(h.value(), StandardCharsets.UTF_8);
    }

    private static String group(Pattern p, String body) {
        Matcher m = p.matcher(body);
        if (!m.find()) {
            throw new IllegalArgumentException("malformed ledger payload: " + body);
        }
        return m.group(1);
    }
}
