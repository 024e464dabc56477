package pyrmq.interop;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.TypeReference;
import java.io.BufferedReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;

/**
 * What Java itself reads from given bytes: the oracle of tests/remoting/test_java_leniency.py's
 * rule tables. Reads the file named by its argument, one case per line, tab-separated:
 *
 * <pre>
 *   body    className  getter  jsonText      RemotingSerializable.decode(jsonText, class).getter()
 *                                            (the release's own JSON library: fastjson 1.2.83 in
 *                                            5.3.3, fastjson2 in 5.5.0)
 *   header  className  getter  extFieldsJson a request with these extFields (a JSON object of
 *                                            strings), decodeCommandCustomHeader(class).getter()
 *   command -          key     headerJson    the JSON header of a frame as the release decodes it
 *                                            (RemotingCommand.decode), getExtFields().get(key)
 * </pre>
 *
 * and prints one line per case, "ANSWER " and: the value's toString(), "null", or "REFUSED" when decoding
 * threw.
 */
public final class LeniencyOracle {
    private LeniencyOracle() {
    }

    static Object read(String kind, Class<?> type, String input) throws Exception {
        if ("body".equals(kind)) {
            return RemotingSerializable.decode(input.getBytes(StandardCharsets.UTF_8), type);
        }
        HashMap<String, String> fields = JSON.parseObject(input, new TypeReference<HashMap<String, String>>() { });
        RemotingCommand request = RemotingCommand.createRequestCommand(0, null);
        request.setExtFields(fields);
        @SuppressWarnings("unchecked")
        Class<? extends CommandCustomHeader> headerType = (Class<? extends CommandCustomHeader>) type;
        return request.decodeCommandCustomHeader(headerType);
    }

    /** The extFields value `key` of a frame whose JSON header is `headerJson`. */
    static String command(String key, String headerJson) throws Exception {
        byte[] header = headerJson.getBytes(StandardCharsets.UTF_8);
        ByteBuffer frame = ByteBuffer.allocate(4 + header.length);
        frame.putInt(header.length);  // serialize type 0 (JSON) in the top byte
        frame.put(header);
        frame.flip();
        RemotingCommand request = RemotingCommand.decode(frame);
        HashMap<String, String> fields = request.getExtFields();
        return fields == null ? "null" : String.valueOf(fields.get(key));
    }

    public static void main(String[] argv) throws Exception {
        BufferedReader in = Files.newBufferedReader(Path.of(argv[0]), StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", 4);
            String answer;
            try {
                if ("command".equals(parts[0])) {
                    System.out.println("ANSWER " + command(parts[2], parts[3]));
                    continue;
                }
                Class<?> type = Class.forName(parts[1]);
                Object value = read(parts[0], type, parts[3]);
                Object field = type.getMethod(parts[2]).invoke(value);
                answer = String.valueOf(field);
            } catch (Exception e) {
                answer = "REFUSED";
            }
            System.out.println("ANSWER " + answer);
        }
        System.out.flush();
    }
}
