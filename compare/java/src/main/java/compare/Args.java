package compare;

import java.util.HashMap;
import java.util.Map;

/** Args holds --name=value arguments. */
final class Args {
    private final Map<String, String> m = new HashMap<>();

    Args(String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--") || !a.contains("=")) {
                throw new IllegalArgumentException("arguments are --name=value, got " + a);
            }
            m.put(a.substring(2, a.indexOf('=')), a.substring(a.indexOf('=') + 1));
        }
    }

    String get(String name) {
        String v = m.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v;
    }

    int getInt(String name) {
        return Integer.parseInt(get(name));
    }
}
