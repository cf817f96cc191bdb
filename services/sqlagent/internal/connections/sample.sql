-- The SQL agent's sample database for `agentmesh up`: a small outdoor-gear
-- shop. Created once by connections.CreateSample; edit freely.
PRAGMA foreign_keys = ON;

CREATE TABLE customers (
  customer_id INTEGER PRIMARY KEY,
  name        TEXT NOT NULL,
  email       TEXT NOT NULL UNIQUE,
  country     TEXT NOT NULL,
  city        TEXT NOT NULL,
  signup_date TEXT NOT NULL -- ISO 8601 date
);

CREATE TABLE products (
  product_id INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  category   TEXT NOT NULL,
  unit_price REAL NOT NULL
);

CREATE TABLE orders (
  order_id    INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
  order_date  TEXT NOT NULL, -- ISO 8601 date
  status      TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'delivered', 'cancelled'))
);

CREATE TABLE order_items (
  order_id   INTEGER NOT NULL REFERENCES orders(order_id),
  product_id INTEGER NOT NULL REFERENCES products(product_id),
  quantity   INTEGER NOT NULL CHECK (quantity > 0),
  unit_price REAL NOT NULL,
  PRIMARY KEY (order_id, product_id)
);

INSERT INTO customers (customer_id, name, email, country, city, signup_date) VALUES
  (1, 'Ava Thompson', 'ava.thompson@example.com', 'Australia', 'Sydney', '2024-02-04'),
  (2, 'Liam Chen', 'liam.chen@example.com', 'Australia', 'Melbourne', '2024-03-07'),
  (3, 'Sofia Rossi', 'sofia.rossi@example.com', 'Italy', 'Milan', '2024-04-10'),
  (4, 'Noah Müller', 'noah.mueller@example.com', 'Germany', 'Berlin', '2024-05-13'),
  (5, 'Mia Dubois', 'mia.dubois@example.com', 'France', 'Lyon', '2024-06-16'),
  (6, 'Lucas Silva', 'lucas.silva@example.com', 'Brazil', 'São Paulo', '2024-07-19'),
  (7, 'Emma Wilson', 'emma.wilson@example.com', 'United Kingdom', 'Leeds', '2024-08-22'),
  (8, 'Kenji Sato', 'kenji.sato@example.com', 'Japan', 'Osaka', '2024-09-25'),
  (9, 'Olivia Brown', 'olivia.brown@example.com', 'United States', 'Denver', '2024-10-01'),
  (10, 'Arjun Patel', 'arjun.patel@example.com', 'India', 'Pune', '2024-11-04');

INSERT INTO products (product_id, name, category, unit_price) VALUES
  (1, 'Trail Running Shoes', 'Footwear', 129.00),
  (2, 'Waterproof Jacket', 'Apparel', 189.50),
  (3, 'Merino Base Layer', 'Apparel', 79.90),
  (4, 'Hiking Poles (pair)', 'Equipment', 64.00),
  (5, '2-Person Tent', 'Equipment', 349.00),
  (6, 'Sleeping Bag -5°C', 'Equipment', 219.00),
  (7, 'Headlamp 400lm', 'Electronics', 45.00),
  (8, 'GPS Watch', 'Electronics', 399.00),
  (9, 'Water Filter', 'Equipment', 39.95),
  (10, 'Wool Socks (3 pack)', 'Apparel', 24.50);

INSERT INTO orders (order_id, customer_id, order_date, status) VALUES
  (1, 6, '2025-03-13', 'delivered'),
  (2, 6, '2025-10-02', 'pending'),
  (3, 7, '2025-07-03', 'delivered'),
  (4, 1, '2025-10-04', 'delivered'),
  (5, 9, '2025-03-10', 'shipped'),
  (6, 10, '2025-05-18', 'delivered'),
  (7, 4, '2025-06-04', 'pending'),
  (8, 7, '2025-06-15', 'cancelled'),
  (9, 4, '2025-02-19', 'delivered'),
  (10, 2, '2025-09-14', 'delivered'),
  (11, 2, '2025-09-19', 'delivered'),
  (12, 2, '2025-02-09', 'shipped'),
  (13, 8, '2025-05-23', 'shipped'),
  (14, 2, '2025-08-02', 'delivered'),
  (15, 8, '2025-02-06', 'shipped'),
  (16, 9, '2025-05-23', 'shipped'),
  (17, 3, '2025-03-08', 'delivered'),
  (18, 3, '2025-05-10', 'delivered'),
  (19, 6, '2025-10-19', 'delivered'),
  (20, 1, '2025-08-28', 'pending'),
  (21, 8, '2025-07-02', 'delivered'),
  (22, 3, '2025-02-11', 'cancelled'),
  (23, 10, '2025-03-18', 'delivered'),
  (24, 10, '2025-07-05', 'delivered');

INSERT INTO order_items (order_id, product_id, quantity, unit_price) VALUES
  (1, 9, 1, 39.95),
  (2, 1, 1, 129.00),
  (3, 9, 2, 39.95),
  (4, 1, 1, 129.00),
  (4, 7, 1, 45.00),
  (4, 10, 1, 24.50),
  (5, 9, 1, 39.95),
  (6, 10, 3, 24.50),
  (7, 1, 2, 129.00),
  (7, 2, 3, 189.50),
  (7, 4, 3, 64.00),
  (8, 5, 1, 349.00),
  (8, 6, 1, 219.00),
  (9, 6, 2, 219.00),
  (9, 8, 3, 399.00),
  (9, 10, 1, 24.50),
  (10, 3, 2, 79.90),
  (10, 8, 1, 399.00),
  (11, 6, 3, 219.00),
  (11, 8, 2, 399.00),
  (12, 1, 3, 129.00),
  (12, 2, 3, 189.50),
  (12, 5, 3, 349.00),
  (13, 1, 2, 129.00),
  (13, 6, 1, 219.00),
  (13, 8, 3, 399.00),
  (14, 3, 2, 79.90),
  (14, 4, 2, 64.00),
  (15, 5, 1, 349.00),
  (15, 9, 2, 39.95),
  (16, 4, 1, 64.00),
  (16, 7, 1, 45.00),
  (17, 8, 3, 399.00),
  (18, 7, 3, 45.00),
  (19, 9, 3, 39.95),
  (20, 7, 2, 45.00),
  (20, 10, 1, 24.50),
  (21, 4, 2, 64.00),
  (22, 2, 1, 189.50),
  (23, 1, 1, 129.00),
  (23, 10, 1, 24.50),
  (24, 6, 2, 219.00),
  (24, 10, 1, 24.50);
